// Fuzz target: the GGUF reader (vq::GgufFile::parse) and the tokenizer built from its metadata.
// Invariants: parsing succeeds or throws vq::Error; every accepted tensor lies inside the buffer
// and dequantizes; an accepted vocabulary encodes a fixed text to ids inside the vocabulary and
// decodes them.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "veloxquant/gguf.hpp"
#include "veloxquant/tokenizers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = vq::MappedFile::from_bytes(data, size, "fuzz.gguf");
  vq::GgufFile g;
  if (!vq::fuzz::refused_cleanly([&] { g = vq::GgufFile::parse(file); })) return 0;
  for (const vq::GgufTensorInfo& t : g.tensors()) {
    VQ_FUZZ_ASSERT(g.data_offset() + t.offset + t.bytes <= size,
                   "tensor " + t.name + " past the buffer");
    std::vector<float> v;
    vq::fuzz::refused_cleanly([&] { v = g.dequantize(t); });
    VQ_FUZZ_ASSERT(static_cast<int64_t>(v.size()) == t.numel(), "dequantize size");
  }
  std::unique_ptr<vq::TextTokenizer> tok;
  if (!vq::fuzz::refused_cleanly([&] { tok = vq::tokenizer_from_gguf(g); })) return 0;
  std::vector<int32_t> ids;
  if (!vq::fuzz::refused_cleanly(
          [&] { ids = tok->encode("Once upon a time, \xc3\xa9t\xc3\xa9 <s> 123\n", true, true); }))
    return 0;
  for (int32_t id : ids)
    VQ_FUZZ_ASSERT(id >= 0 && id < tok->vocab_size(),
                   "encode produced an id outside the vocabulary");
  vq::fuzz::refused_cleanly([&] { (void)tok->decode(ids); });
  return 0;
}

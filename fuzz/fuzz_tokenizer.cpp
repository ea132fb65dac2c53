// Fuzz target: the llama2.c tokenizer.bin loader, vq::Tokenizer::load (through a temp file).
// Invariants: load succeeds or throws vq::Error; an accepted vocabulary can encode text (its own
// first pieces and a fixed sentence) and decode the result without touching memory it does not own.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_tempfile.inc"
#include "fuzz_util.hpp"
#include "veloxquant/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = vq::fuzz::temp_path("tokenizer");
  vq::fuzz::write_temp(path, data, size);
  vq::Tokenizer t;
  if (!vq::fuzz::refused_cleanly([&] { t = vq::Tokenizer::load(path); })) return 0;
  const int64_t n = t.vocab_size();
  std::string text = "Once upon a time, \xc3\xa9t\xc3\xa9 <0x41>";
  for (int64_t i = 0; i < n && i < 8; ++i) text += t.piece(static_cast<int32_t>(i));
  std::vector<int32_t> ids;
  if (!vq::fuzz::refused_cleanly([&] { ids = t.encode(text, true, true); })) return 0;
  for (int32_t id : ids)
    VQ_FUZZ_ASSERT(id >= 0 && id < n, "encode produced an id outside the vocabulary");
  vq::fuzz::refused_cleanly([&] { (void)t.decode(ids); });
  return 0;
}

// Fuzz target: the Huffman / fixed-width stream decoder (coding/huffman.hpp).
// Input: byte 0 = width selector (1..8), bytes 1-2 = symbol count n (< 4096), the rest = a stream.
// Invariants: decode succeeds or throws vq::Error; decoded symbols are < 2^width; re-encoding them
// and decoding again gives the same symbols and consumes exactly the bytes written.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "coding/huffman.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const int width = 1 + data[0] % 8;
  const size_t n = (static_cast<size_t>(data[1]) | (static_cast<size_t>(data[2]) << 8)) % 4096;
  vq::coding::HuffmanDecoder dec;
  std::vector<uint8_t> sym(n);
  bool ok = vq::fuzz::refused_cleanly([&] {
    vq::coding::ByteReader in(data + 3, size - 3);
    dec.decode(in, sym.data(), n, width);
  });
  if (!ok) return 0;
  for (uint8_t s : sym) VQ_FUZZ_ASSERT(s < (1u << width), "decoded symbol outside the alphabet");
  vq::coding::HuffmanEncoder enc;
  std::vector<uint8_t> stream;
  const vq::coding::StreamSizes sz = enc.encode(sym.data(), n, width, stream);
  VQ_FUZZ_ASSERT(static_cast<int64_t>(stream.size()) == sz.total(), "stream size accounting");
  std::vector<uint8_t> back(n);
  vq::coding::ByteReader in2(stream.data(), stream.size());
  if (!vq::fuzz::refused_cleanly([&] { dec.decode(in2, back.data(), n, width); })) {
    vq::fuzz::fail("re-encoded stream does not decode");
  }
  VQ_FUZZ_ASSERT(in2.at_end(), "decoder left bytes of its own stream unread");
  VQ_FUZZ_ASSERT(back == sym, "re-encode / decode changed the symbols");
  return 0;
}

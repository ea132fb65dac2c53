// Fuzz target: the entropy stream decoder (coding/huffman.hpp: modes 0..3, and mode 4 of
// coding/range_coder.hpp) and both encoder policies.
// Input: byte 0 = width selector (low 3 bits: width - 1) and segment selector (high 5 bits),
// bytes 1-2 = symbol count n (< 4096), the rest = a stream.
// Invariants:
//  1. decode succeeds or throws vq::Error; decoded symbols are < 2^width; re-encoding them (with
//     the Huffman policy and with Auto) and decoding again gives the same symbols and consumes
//     exactly the bytes written; Auto is never larger than Huffman;
//  2. the stream bytes themselves, masked to the width, are a second symbol sequence that must
//     survive encode -> decode under both policies (this reaches mode 4 on most inputs, since
//     the decode of random bytes usually fails).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "coding/huffman.hpp"
#include "fuzz_util.hpp"

namespace {

/// A divisor of n (n >= 1) picked by sel: the sel-th divisor in ascending order, cyclically.
size_t pick_segment(size_t n, unsigned sel) {
  std::vector<size_t> divs;
  for (size_t d = 1; d <= n; ++d)
    if (n % d == 0) divs.push_back(d);
  return divs[sel % divs.size()];
}

void round_trip(const std::vector<uint8_t>& sym, int width, unsigned sel) {
  const size_t n = sym.size();
  const size_t seg = n == 0 ? 1 : pick_segment(n, sel);
  vq::coding::HuffmanEncoder enc;
  vq::coding::HuffmanDecoder dec;
  int64_t huffman_total = -1;
  for (auto policy : {vq::coding::EntropyPolicy::Huffman, vq::coding::EntropyPolicy::Auto}) {
    std::vector<uint8_t> stream;
    const vq::coding::StreamSizes sz = enc.encode(sym.data(), n, width, stream, policy, seg);
    VQ_FUZZ_ASSERT(static_cast<int64_t>(stream.size()) == sz.total(), "stream size accounting");
    VQ_FUZZ_ASSERT(stream.empty() || stream[0] == static_cast<uint8_t>(sz.mode),
                   "reported mode differs from the stored one");
    if (policy == vq::coding::EntropyPolicy::Huffman) {
      VQ_FUZZ_ASSERT(sz.mode != vq::coding::StreamMode::Range, "Huffman policy chose mode 4");
      huffman_total = sz.total();
    } else {
      VQ_FUZZ_ASSERT(sz.total() <= huffman_total, "Auto stream larger than the Huffman one");
    }
    std::vector<uint8_t> back(n);
    vq::coding::ByteReader in(stream.data(), stream.size());
    if (!vq::fuzz::refused_cleanly([&] { dec.decode(in, back.data(), n, width); })) {
      vq::fuzz::fail("re-encoded stream does not decode");
    }
    VQ_FUZZ_ASSERT(in.at_end(), "decoder left bytes of its own stream unread");
    VQ_FUZZ_ASSERT(back == sym, "encode / decode changed the symbols");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const int width = 1 + data[0] % 8;
  const unsigned sel = data[0] >> 3;
  const size_t n = (static_cast<size_t>(data[1]) | (static_cast<size_t>(data[2]) << 8)) % 4096;

  // 2. The raw bytes as symbols (at most 4096 of them).
  {
    const size_t m = std::min<size_t>(size - 3, 4096);
    std::vector<uint8_t> raw(data + 3, data + 3 + m);
    for (auto& s : raw) s = static_cast<uint8_t>(s & ((1u << width) - 1));
    round_trip(raw, width, sel);
  }

  // 1. The bytes as a stream.
  vq::coding::HuffmanDecoder dec;
  std::vector<uint8_t> sym(n);
  bool ok = vq::fuzz::refused_cleanly([&] {
    vq::coding::ByteReader in(data + 3, size - 3);
    dec.decode(in, sym.data(), n, width);
  });
  if (!ok) return 0;
  for (uint8_t s : sym) VQ_FUZZ_ASSERT(s < (1u << width), "decoded symbol outside the alphabet");
  round_trip(sym, width, sel);
  return 0;
}

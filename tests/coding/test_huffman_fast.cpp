// The fast entropy paths (32-bit-store writer, eight-at-a-time fixed-width packing, the 64-bit
// buffered Huffman reader) against the plain reference paths they replace: identical bytes on
// encode, identical symbols on decode, and the same accept/reject decision on corrupted streams.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "coding/huffman.hpp"
#include "core/rng.hpp"
#include "veloxquant/errors.hpp"

namespace vq::coding {
namespace {

std::vector<uint8_t> symbols(Rng& rng, size_t n, int width, int dist) {
  std::vector<uint8_t> s(n);
  const uint32_t A = 1u << width;
  for (auto& x : s) {
    if (dist == 0) {
      x = static_cast<uint8_t>(rng.below(A));
    } else {
      const double ratio = dist == 1 ? 0.3 : 0.85;
      uint32_t k = 0;
      while (k + 1 < A && rng.uniform() < ratio) ++k;
      x = static_cast<uint8_t>(k);
    }
  }
  return s;
}

// Decode with the fast or reference reader; returns the symbols, or the string "throw".
std::string try_decode(const std::vector<uint8_t>& bytes, size_t n, int width, bool fast) {
  HuffmanDecoder dec;
  ByteReader in(bytes.data(), bytes.size());
  std::vector<uint8_t> out(n);
  try {
    if (fast)
      dec.decode(in, out.data(), n, width);
    else
      dec.decode_reference(in, out.data(), n, width);
  } catch (const FormatError&) {
    return "throw";
  }
  return std::string(out.begin(), out.end()) + "|" + std::to_string(in.pos());
}

TEST(CodingHuffmanFast, EncodeBytesAndDecodedSymbolsMatchTheReference) {
  Rng rng(7);
  HuffmanEncoder enc;
  int modes[4] = {0, 0, 0, 0};
  for (int width = 1; width <= 8; ++width) {
    for (size_t n : {size_t{1}, size_t{3}, size_t{8}, size_t{9}, size_t{63}, size_t{128},
                     size_t{1001}, size_t{8192}}) {
      for (int dist = 0; dist < 3; ++dist) {
        const auto s = symbols(rng, n, width, dist);
        std::vector<uint8_t> fast = {0xAB}, ref = {0xAB};  // a prefix: appends must keep it
        const StreamSizes a = enc.encode(s.data(), n, width, fast);
        const StreamSizes b = enc.encode_reference(s.data(), n, width, ref);
        ASSERT_EQ(fast, ref) << "width=" << width << " n=" << n << " dist=" << dist;
        ASSERT_EQ(a.total(), b.total());
        ++modes[static_cast<int>(a.mode)];
        const std::vector<uint8_t> stream(fast.begin() + 1, fast.end());
        const std::string f = try_decode(stream, n, width, true);
        ASSERT_EQ(f, try_decode(stream, n, width, false));
        ASSERT_EQ(f, std::string(s.begin(), s.end()) + "|" + std::to_string(stream.size()));
      }
    }
  }
  // The sweep must exercise every non-empty mode.
  EXPECT_GT(modes[static_cast<int>(StreamMode::Single)], 0);
  EXPECT_GT(modes[static_cast<int>(StreamMode::Huffman)], 0);
  EXPECT_GT(modes[static_cast<int>(StreamMode::Fixed)], 0);
}

TEST(CodingHuffmanFast, CorruptStreamsGetTheSameVerdictAsTheReference) {
  Rng rng(11);
  HuffmanEncoder enc;
  int rejected = 0, trials = 0;
  for (int width : {1, 3, 4, 6, 8}) {
    for (int dist = 0; dist < 3; ++dist) {
      const size_t n = 77 + rng.below(300);
      const auto s = symbols(rng, n, width, dist);
      std::vector<uint8_t> bytes;
      enc.encode(s.data(), n, width, bytes);
      for (int t = 0; t < 60; ++t) {
        std::vector<uint8_t> bad = bytes;
        const int kind = t % 3;
        if (kind == 0) {  // flip one bit
          const size_t at = rng.below(static_cast<uint32_t>(bad.size()));
          bad[at] = static_cast<uint8_t>(bad[at] ^ (1u << rng.below(8)));
        } else if (kind == 1) {  // truncate
          bad.resize(rng.below(static_cast<uint32_t>(bad.size())));
        } else {  // overwrite a payload byte near the end (padding / last codes)
          bad[bad.size() - 1 -
              rng.below(std::min<uint32_t>(4, static_cast<uint32_t>(bad.size())))] =
              static_cast<uint8_t>(rng.below(256));
        }
        const std::string f = try_decode(bad, n, width, true);
        ASSERT_EQ(f, try_decode(bad, n, width, false))
            << "width=" << width << " dist=" << dist << " trial=" << t;
        rejected += f == "throw";
        ++trials;
      }
    }
  }
  EXPECT_GT(rejected, trials / 4);  // the corruptions do get caught
}

// Long streams take the multi-symbol table (up to four codes per lookup on a widened window):
// adversarial code tables against the reference reader, intact and corrupted. Cases: every code
// of the maximal length kMaxCodeLength (a geometric distribution over 256 symbols), two symbols
// of one bit each, one dominant symbol with rare others (its code is 1 bit, the rest long), and
// an incomplete code table (a stream whose table leaves window values without a code).
TEST(CodingHuffmanFast, MultiSymbolTableMatchesTheReferenceOnAdversarialTables) {
  Rng rng(23);
  HuffmanEncoder enc;
  int longest = 0, rejected = 0, trials = 0;
  for (int kind = 0; kind < 4; ++kind) {
    const int width = kind == 1 ? 2 : 8;
    const size_t n = 20000 + rng.below(50);
    std::vector<uint8_t> s(n);
    for (auto& x : s) {
      if (kind == 0) {  // P(k) ~ 0.55^k: the tail needs length-limited codes
        uint32_t k = 0;
        while (k + 1 < 256 && rng.uniform() < 0.55) ++k;
        x = static_cast<uint8_t>(k);
      } else if (kind == 1) {
        x = static_cast<uint8_t>(rng.below(2));
      } else {
        x = static_cast<uint8_t>(rng.uniform() < 0.999 ? 5 : rng.below(256));
      }
    }
    std::vector<uint8_t> bytes;
    const StreamSizes sz = enc.encode(s.data(), n, width, bytes);
    ASSERT_EQ(sz.mode, StreamMode::Huffman) << "kind " << kind;
    for (uint8_t l : enc.last_lengths()) longest = std::max<int>(longest, l);
    if (kind == 3) {
      // Raise one code's length in the table (Kraft sum < 1: some window values have no code);
      // the payload then decodes differently or is rejected, the same way by both readers.
      const size_t table = 1 + static_cast<size_t>(varint_size(n)) + 1;
      for (size_t b = table; b < table + 128; ++b)
        if ((bytes[b] & 0x0F) != 0 && (bytes[b] & 0x0F) < kMaxCodeLength) {
          bytes[b] = static_cast<uint8_t>(bytes[b] + 1);
          break;
        }
    }
    const std::string f = try_decode(bytes, n, width, true);
    ASSERT_EQ(f, try_decode(bytes, n, width, false)) << "kind " << kind;
    if (kind != 3) {
      ASSERT_EQ(f, std::string(s.begin(), s.end()) + "|" + std::to_string(bytes.size()));
    }
    for (int t = 0; t < 40; ++t) {
      std::vector<uint8_t> bad = bytes;
      const size_t at = rng.below(static_cast<uint32_t>(bad.size()));
      bad[at] = static_cast<uint8_t>(bad[at] ^ (1u << rng.below(8)));
      const std::string g = try_decode(bad, n, width, true);
      ASSERT_EQ(g, try_decode(bad, n, width, false)) << "kind " << kind << " trial " << t;
      rejected += g == "throw";
      ++trials;
    }
  }
  EXPECT_EQ(longest, kMaxCodeLength);  // the maximal code length was exercised
  EXPECT_GT(rejected, 0);
  EXPECT_GT(trials, 0);
}

// Several consecutive streams through decode_streams (long Huffman payloads decoded in pairs)
// against one decode_reference per stream: the same symbols and bytes consumed, and on corrupted
// input the same verdict with the same message.
TEST(CodingHuffmanFast, DecodeStreamsMatchesOneReferenceDecodePerStream) {
  Rng rng(31);
  HuffmanEncoder enc;
  struct Spec {
    size_t n;
    int width, dist;
  };
  // Long Huffman streams (paired), short ones, fixed-width and single-symbol ones in between.
  const std::vector<Spec> specs = {{3000, 2, 1}, {9000, 8, 2}, {2500, 3, 1},
                                   {40, 4, 1},   {1200, 6, 0}, {5000, 4, 2},
                                   {700, 1, 0},  {4000, 3, 2}, {90, 8, 2}};
  std::vector<uint8_t> bytes;
  std::vector<std::vector<uint8_t>> sym;
  int huffman_long = 0;
  for (const Spec& sp : specs) {
    sym.push_back(symbols(rng, sp.n, sp.width, sp.dist));
    const StreamSizes sz = enc.encode(sym.back().data(), sp.n, sp.width, bytes);
    huffman_long += sz.mode == StreamMode::Huffman && sp.n >= 2000 ? 1 : 0;
  }
  sym.push_back(std::vector<uint8_t>(500, 3));  // a single-symbol stream last
  enc.encode(sym.back().data(), 500, 2, bytes);
  EXPECT_GE(huffman_long, 4);  // at least two pairs take the interleaved loop
  const size_t count = sym.size();
  auto run = [&](const std::vector<uint8_t>& in_bytes, bool streams) -> std::string {
    std::vector<std::vector<uint8_t>> out(count);
    std::vector<HuffmanDecoder::StreamSpec> spec;
    for (size_t k = 0; k < count; ++k) {
      out[k].assign(sym[k].size(), 0xEE);
      const int width = k < specs.size() ? specs[k].width : 2;
      spec.push_back({out[k].data(), sym[k].size(), width});
    }
    HuffmanDecoder dec;
    ByteReader in(in_bytes.data(), in_bytes.size());
    try {
      if (streams) {
        dec.decode_streams(in, spec.data(), spec.size());
      } else {
        for (const auto& sp : spec) dec.decode_reference(in, sp.out, sp.n, sp.width);
      }
    } catch (const FormatError& e) {
      return std::string("throw: ") + e.what();
    }
    std::string r;
    for (const auto& o : out) r += std::string(o.begin(), o.end()) + "/";
    return r + std::to_string(in.pos());
  };
  std::string expect;
  for (const auto& x : sym) expect += std::string(x.begin(), x.end()) + "/";
  expect += std::to_string(bytes.size());
  ASSERT_EQ(run(bytes, true), expect);
  ASSERT_EQ(run(bytes, false), expect);
  int rejected = 0;
  for (int t = 0; t < 150; ++t) {
    std::vector<uint8_t> bad = bytes;
    if (t % 3 == 2) {
      bad.resize(rng.below(static_cast<uint32_t>(bad.size())));
    } else {
      const size_t at = rng.below(static_cast<uint32_t>(bad.size()));
      bad[at] = static_cast<uint8_t>(bad[at] ^ (1u << rng.below(8)));
    }
    const std::string f = run(bad, true);
    ASSERT_EQ(f, run(bad, false)) << "trial " << t;
    rejected += f.rfind("throw", 0) == 0 ? 1 : 0;
  }
  EXPECT_GT(rejected, 20);
}

}  // namespace
}  // namespace vq::coding

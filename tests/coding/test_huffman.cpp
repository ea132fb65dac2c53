// Canonical order-0 Huffman coder: lossless round trip, exact stream sizes with the table counted,
// fixed-width fallback, degenerate inputs, documented bit order, length limiting, and rejection of
// mismatched counts, truncation and corrupt tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "coding/huffman.hpp"
#include "core/rng.hpp"
#include "veloxquant/errors.hpp"

namespace vq::coding {
namespace {

std::vector<uint8_t> encode(const std::vector<uint8_t>& sym, int width, StreamSizes* sz = nullptr) {
  HuffmanEncoder enc;
  std::vector<uint8_t> out;
  const StreamSizes s = enc.encode(sym.data(), sym.size(), width, out);
  if (sz) *sz = s;
  return out;
}

std::vector<uint8_t> decode(const std::vector<uint8_t>& bytes, size_t n, int width) {
  HuffmanDecoder dec;
  ByteReader in(bytes.data(), bytes.size());
  std::vector<uint8_t> out(n);
  dec.decode(in, out.data(), n, width);
  if (!in.at_end()) throw FormatError("trailing bytes");
  return out;
}

/// Geometric-ish distribution over [0, 2^width): symbol k with weight ratio^k.
std::vector<uint8_t> skewed(Rng& rng, size_t n, int width, double ratio) {
  std::vector<uint8_t> s(n);
  const int A = 1 << width;
  for (auto& x : s) {
    int k = 0;
    while (k + 1 < A && rng.uniform() < ratio) ++k;
    x = static_cast<uint8_t>(k);
  }
  return s;
}

TEST(CodingHuffman, RoundTripAcrossAlphabetsSizesAndDistributions) {
  Rng rng(1);
  for (int width = 1; width <= 8; ++width) {
    for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{100}, size_t{5000}}) {
      for (int dist = 0; dist < 3; ++dist) {
        std::vector<uint8_t> s;
        if (dist == 0) {
          s.resize(n);
          for (auto& x : s) x = static_cast<uint8_t>(rng.below(1u << width));
        } else {
          s = skewed(rng, n, width, dist == 1 ? 0.3 : 0.8);
        }
        StreamSizes sz;
        const auto bytes = encode(s, width, &sz);
        ASSERT_EQ(static_cast<int64_t>(bytes.size()), sz.total());
        ASSERT_EQ(sz.fixed_width_payload, static_cast<int64_t>((n * width + 7) / 8));
        // Never worse than fixed width with the same header.
        ASSERT_LE(sz.total(),
                  1 + 1 + (n >= 128 ? 1 : 0) + (n >= 16384 ? 1 : 0) + sz.fixed_width_payload);
        ASSERT_EQ(decode(bytes, n, width), s)
            << "width=" << width << " n=" << n << " dist=" << dist;
      }
    }
  }
}

TEST(CodingHuffman, SkewedDataUsesHuffmanAndCountsItsTable) {
  Rng rng(2);
  const auto s = skewed(rng, 4000, 4, 0.35);
  StreamSizes sz;
  const auto bytes = encode(s, 4, &sz);
  ASSERT_EQ(sz.mode, StreamMode::Huffman);
  EXPECT_LT(sz.payload, sz.fixed_width_payload);
  // overhead = mode + varint(count) + (A - 1) byte + ceil(A / 2) length bytes + varint(payload).
  int A = 0;
  for (uint8_t x : s) A = std::max(A, x + 1);
  const int64_t expect = 1 + 2 + 1 + (A + 1) / 2 + (sz.payload >= 128 ? 2 : 1);
  EXPECT_EQ(sz.overhead, expect);
  EXPECT_EQ(bytes[0], static_cast<uint8_t>(StreamMode::Huffman));
}

TEST(CodingHuffman, UniformDataFallsBackToFixedWidth) {
  Rng rng(3);
  std::vector<uint8_t> s(3000);
  for (auto& x : s) x = static_cast<uint8_t>(rng.below(256));
  StreamSizes sz;
  const auto bytes = encode(s, 8, &sz);
  EXPECT_EQ(sz.mode, StreamMode::Fixed);
  EXPECT_EQ(sz.payload, 3000);
  EXPECT_EQ(decode(bytes, 3000, 8), s);
}

TEST(CodingHuffman, EmptyAndSingleSymbolInputs) {
  StreamSizes sz;
  const auto empty = encode({}, 3, &sz);
  EXPECT_EQ(sz.mode, StreamMode::Empty);
  EXPECT_EQ(empty, (std::vector<uint8_t>{0, 0}));
  EXPECT_TRUE(decode(empty, 0, 3).empty());
  EXPECT_THROW(decode(empty, 1, 3), FormatError);

  const std::vector<uint8_t> same(1000, 5);
  const auto single = encode(same, 3, &sz);
  EXPECT_EQ(sz.mode, StreamMode::Single);
  EXPECT_EQ(sz.payload, 0);
  EXPECT_EQ(single.size(), 4u);  // mode, varint(1000) = 2 bytes, symbol
  EXPECT_EQ(decode(single, 1000, 3), same);
  const auto one = encode({2}, 2, &sz);
  EXPECT_EQ(decode(one, 1, 2), std::vector<uint8_t>{2});
}

TEST(CodingHuffman, DocumentedBitOrderMsbFirst) {
  // Width 1, fixed mode: bits 1,0,1,1,0,0,0,0 | 1 -> 0xB0, 0x80 (zero padded).
  const std::vector<uint8_t> s{1, 0, 1, 1, 0, 0, 0, 0, 1};
  EXPECT_EQ(encode(s, 1), (std::vector<uint8_t>{3, 9, 0xB0, 0x80}));
  // Canonical codes for lengths {a:1, b:2, c:3, d:3} are 0, 10, 110, 111.
  std::vector<uint32_t> codes;
  canonical_codes({1, 2, 3, 3}, codes);
  EXPECT_EQ(codes, (std::vector<uint32_t>{0b0, 0b10, 0b110, 0b111}));
  // Huffman mode: 80 zeros, 4 ones, 2 twos, 2 threes in width 2 -> lengths 1, 2, 3, 3.
  std::vector<uint8_t> h(80, 0);
  h.insert(h.end(), {1, 1, 1, 1, 2, 2, 3, 3});
  StreamSizes sz;
  const auto bytes = encode(h, 2, &sz);
  ASSERT_EQ(sz.mode, StreamMode::Huffman);
  // mode 2, count 88, A-1 = 3, lengths 0x21 (sym0=1, sym1=2), 0x33, payload bytes, then payload.
  ASSERT_GE(bytes.size(), 6u);
  EXPECT_EQ(bytes[0], 2);
  EXPECT_EQ(bytes[1], 88);
  EXPECT_EQ(bytes[2], 3);
  EXPECT_EQ(bytes[3], 0x21);
  EXPECT_EQ(bytes[4], 0x33);
  // 80 x "0" = 10 zero bytes, then 10 10 10 10 110 110 111 111 -> 1010 1010 1101 1011 1111 (pad
  // 0000).
  const std::vector<uint8_t> payload(bytes.begin() + 6, bytes.end());
  EXPECT_EQ(bytes[5], payload.size());
  EXPECT_EQ(payload, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xAA, 0xDB, 0xF0}));
  EXPECT_EQ(decode(bytes, h.size(), 2), h);
}

// The code lengths of the documented merge rule (always the two lightest nodes by (weight, node
// index); leaves are nodes 0..m-1 in symbol order, merged nodes numbered on from m), computed the
// slow way: a scan of every live node per pick. Zero-frequency symbols get length 0.
std::vector<uint8_t> reference_lengths(const std::vector<uint64_t>& freq) {
  std::vector<int> sym;
  std::vector<uint64_t> w;
  for (size_t s = 0; s < freq.size(); ++s)
    if (freq[s] > 0) {
      sym.push_back(static_cast<int>(s));
      w.push_back(freq[s]);
    }
  const size_t m = w.size();
  std::vector<int> parent(2 * m - 1, -1);
  std::vector<bool> live(2 * m - 1, false);
  for (size_t i = 0; i < m; ++i) live[i] = true;
  for (size_t next = m; next < 2 * m - 1; ++next) {
    size_t pick[2];
    for (size_t& p : pick) {
      p = next;
      for (size_t i = 0; i < next; ++i)
        if (live[i] && (p == next || w[i] < w[p])) p = i;
      live[p] = false;
    }
    w.push_back(w[pick[0]] + w[pick[1]]);
    live[next] = true;
    parent[pick[0]] = parent[pick[1]] = static_cast<int>(next);
  }
  std::vector<uint8_t> len(freq.size(), 0);
  for (size_t i = 0; i < m; ++i) {
    int d = 0;
    for (int x = static_cast<int>(i); parent[static_cast<size_t>(x)] >= 0;
         x = parent[static_cast<size_t>(x)])
      ++d;
    len[static_cast<size_t>(sym[i])] = static_cast<uint8_t>(d);
  }
  return len;
}

TEST(CodingHuffman, LengthsFollowTheMergeRuleOnLargeAlphabetsWithTies) {
  // Alphabets above 32 symbols take the radix-sorted leaf queue; weights drawn from a few values
  // (many ties) and from a wide range (several radix passes). Trees deeper than the length limit
  // are skipped: those lengths are rebalanced, not the plain rule's.
  Rng rng(23);
  int compared = 0;
  for (int rep = 0; rep < 300; ++rep) {
    const size_t A = 33 + rng.below(224);
    std::vector<uint64_t> freq(A);
    const int kind = rep % 3;
    for (auto& f : freq)
      f = kind == 0   ? rng.below(4)
          : kind == 1 ? 1000 + rng.below(70000)
                      : (uint64_t{1} << rng.below(12)) + rng.below(3);
    if (std::count_if(freq.begin(), freq.end(), [](uint64_t f) { return f > 0; }) < 2) continue;
    const auto want = reference_lengths(freq);
    if (*std::max_element(want.begin(), want.end()) > kMaxCodeLength) continue;
    std::vector<uint8_t> got;
    huffman_code_lengths(freq, kMaxCodeLength, got);
    ASSERT_EQ(got, want) << "rep " << rep << ", " << A << " symbols";
    ++compared;
  }
  EXPECT_GT(compared, 150);
}

TEST(CodingHuffman, LengthsAreLimitedAndStillDecode) {
  // Fibonacci frequencies would give a 24-deep tree without the limit.
  std::vector<uint64_t> freq(25);
  uint64_t a = 1, b = 1;
  for (auto& f : freq) {
    f = a;
    const uint64_t c = a + b;
    a = b;
    b = c;
  }
  std::vector<uint8_t> lengths;
  huffman_code_lengths(freq, kMaxCodeLength, lengths);
  double kraft = 0;
  for (uint8_t l : lengths) {
    ASSERT_GE(l, 1);
    ASSERT_LE(l, kMaxCodeLength);
    kraft += std::ldexp(1.0, -l);
  }
  EXPECT_LE(kraft, 1.0);
  // A stream with such a distribution round-trips.
  std::vector<uint8_t> s;
  for (size_t k = 0; k < freq.size(); ++k)
    for (uint64_t i = 0; i < std::min<uint64_t>(freq[k], 3000); ++i)
      s.push_back(static_cast<uint8_t>(k));
  Rng rng(4);
  for (size_t i = s.size(); i > 1; --i) std::swap(s[i - 1], s[rng.below(i)]);
  StreamSizes sz;
  const auto bytes = encode(s, 5, &sz);
  EXPECT_EQ(sz.mode, StreamMode::Huffman);
  EXPECT_EQ(decode(bytes, s.size(), 5), s);
}

TEST(CodingHuffman, RejectsMismatchedCountTruncationAndCorruptTables) {
  Rng rng(5);
  const auto s = skewed(rng, 600, 4, 0.5);
  StreamSizes sz;
  const auto bytes = encode(s, 4, &sz);
  ASSERT_EQ(sz.mode, StreamMode::Huffman);
  EXPECT_THROW(decode(bytes, 599, 4), FormatError);
  EXPECT_THROW(decode(bytes, 601, 4), FormatError);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    std::vector<uint8_t> t(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    EXPECT_THROW(decode(t, 600, 4), FormatError) << "cut at " << cut;
  }
  {  // over-subscribed table: every length 1
    auto c = bytes;
    const size_t A = static_cast<size_t>(c[3]) + 1;  // count 600 is a 2-byte varint
    for (size_t k = 0; k < (A + 1) / 2; ++k) c[4 + k] = 0x11;
    EXPECT_THROW(decode(c, 600, 4), FormatError);
  }
  {  // a length above the limit
    auto c = bytes;
    c[4] = 0x0F;
    EXPECT_THROW(decode(c, 600, 4), FormatError);
  }
  {  // alphabet larger than the width allows
    auto c = bytes;
    c[3] = 200;
    EXPECT_THROW(decode(c, 600, 4), FormatError);
  }
  {  // unknown mode
    auto c = bytes;
    c[0] = 9;
    EXPECT_THROW(decode(c, 600, 4), FormatError);
  }
  {  // fixed-width stream cut short, and a symbol outside the alphabet in single mode
    const std::vector<uint8_t> fixed{3, 9, 0xB0};
    EXPECT_THROW(decode(fixed, 9, 1), FormatError);
    const std::vector<uint8_t> single{1, 4, 7};
    EXPECT_THROW(decode(single, 4, 2), FormatError);
  }
  // Random single-bit flips: a FormatError or a clean decode of 600 symbols, nothing else.
  int rejected = 0;
  for (int trial = 0; trial < 400; ++trial) {
    auto c = bytes;
    const size_t pos = rng.below(c.size());
    c[pos] ^= static_cast<uint8_t>(1u << rng.below(8));
    try {
      const auto got = decode(c, 600, 4);
      ASSERT_EQ(got.size(), 600u);
    } catch (const FormatError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST(CodingHuffman, RejectsSymbolsWiderThanTheWidth) {
  HuffmanEncoder enc;
  std::vector<uint8_t> out;
  const uint8_t s[3] = {1, 4, 2};
  EXPECT_THROW(enc.encode(s, 3, 2, out), InvalidArgument);
}

}  // namespace
}  // namespace vq::coding

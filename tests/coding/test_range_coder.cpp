// Entropy stream mode 4 (coding/range_coder.hpp): the segmented adaptive range coder, on its own
// and through HuffmanEncoder's Auto policy. Lossless round trips over every width and segment
// shape, determinism, Auto never larger than the Huffman family, mode 4 chosen where per-segment
// statistics differ, refusal of every malformed stream, and the PCA methods with entropy=auto.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "coding/huffman.hpp"
#include "coding/range_coder.hpp"
#include "core/rng.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/codec.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/vqkv.hpp"

namespace vq::coding {
namespace {

std::vector<uint8_t> decode_all(const std::vector<uint8_t>& bytes, size_t n, int width,
                                bool reference = false) {
  HuffmanDecoder dec;
  ByteReader in(bytes.data(), bytes.size());
  std::vector<uint8_t> out(n);
  if (reference) {
    dec.decode_reference(in, out.data(), n, width);
  } else {
    dec.decode(in, out.data(), n, width);
  }
  if (!in.at_end()) throw FormatError("trailing bytes after the stream");
  return out;
}

/// n_seg segments of `seg` symbols; kind 0 = uniform, 1 = each segment peaked at its own random
/// symbol (geometric spread around it), 2 = all symbols equal, 3 = each segment constant.
std::vector<uint8_t> make_symbols(Rng& rng, size_t seg, size_t n_seg, int width, int kind) {
  const uint32_t A = 1u << width;
  std::vector<uint8_t> s(seg * n_seg);
  const uint8_t global = static_cast<uint8_t>(rng.below(A));
  for (size_t j = 0; j < n_seg; ++j) {
    const uint32_t peak = static_cast<uint32_t>(rng.below(A));
    for (size_t i = 0; i < seg; ++i) {
      uint32_t v = 0;
      if (kind == 0) {
        v = static_cast<uint32_t>(rng.below(A));
      } else if (kind == 1) {
        v = peak;
        while (rng.uniform() < 0.3) v = (v + 1) % A;
      } else if (kind == 2) {
        v = global;
      } else {
        v = peak;
      }
      s[j * seg + i] = static_cast<uint8_t>(v);
    }
  }
  return s;
}

TEST(CodingRangeCoder, RoundTripEveryWidthSegmentShapeAndPrior) {
  Rng rng(11);
  for (int width = 1; width <= 8; ++width) {
    for (size_t seg : {size_t{1}, size_t{2}, size_t{5}, size_t{128}}) {
      for (size_t n_seg : {size_t{1}, size_t{2}, size_t{9}, size_t{40}}) {
        for (int kind = 0; kind < 4; ++kind) {
          const std::vector<uint8_t> s = make_symbols(rng, seg, n_seg, width, kind);
          const size_t n = s.size();
          RangeStreamEncoder enc;
          for (int prior : {0, 1, 4, 16, kRangeMaxPrior}) {
            std::vector<uint8_t> out;
            const RangeStreamSize sz = enc.encode_with_prior(s.data(), n, width, seg, prior, out);
            ASSERT_EQ(static_cast<int64_t>(out.size()), sz.total());
            ASSERT_EQ(out[0], kRangeStreamMode);
            ASSERT_EQ(decode_all(out, n, width), s)
                << "width " << width << " seg " << seg << " x " << n_seg << " kind " << kind
                << " prior " << prior;
            ASSERT_EQ(decode_all(out, n, width, true), s);
          }
          std::vector<uint8_t> best;
          const RangeStreamSize bsz = enc.encode(s.data(), n, width, seg, best);
          ASSERT_EQ(static_cast<int64_t>(best.size()), bsz.total());
          ASSERT_EQ(decode_all(best, n, width), s);
        }
      }
    }
  }
}

TEST(CodingRangeCoder, OneSymbolAndSingleSymbolSegments) {
  for (int width = 1; width <= 8; ++width) {
    const uint32_t A = 1u << width;
    for (uint32_t v : {0u, A - 1}) {
      const std::vector<uint8_t> one = {static_cast<uint8_t>(v)};
      RangeStreamEncoder enc;
      std::vector<uint8_t> out;
      enc.encode_with_prior(one.data(), 1, width, 1, 0, out);
      EXPECT_EQ(decode_all(out, 1, width), one);
    }
    // 50 one-symbol segments: every segment is its own model.
    Rng rng(static_cast<uint64_t>(width));
    std::vector<uint8_t> s(50);
    for (auto& x : s) x = static_cast<uint8_t>(rng.below(A));
    RangeStreamEncoder enc;
    std::vector<uint8_t> out;
    enc.encode(s.data(), s.size(), width, 1, out);
    EXPECT_EQ(decode_all(out, s.size(), width), s);
  }
}

TEST(CodingRangeCoder, LongSegmentsRescaleTheModel) {
  // 100000 symbols in one segment push the model total past kRangeMaxTotal many times.
  Rng rng(5);
  for (int width : {1, 4, 8}) {
    std::vector<uint8_t> s(100000);
    for (auto& x : s) x = static_cast<uint8_t>(rng.uniform() < 0.9 ? 1 : rng.below(1u << width));
    RangeStreamEncoder enc;
    std::vector<uint8_t> out;
    enc.encode(s.data(), s.size(), width, s.size(), out);
    EXPECT_EQ(decode_all(out, s.size(), width), s);
  }
}

TEST(CodingRangeCoder, DeterministicBytes) {
  Rng rng(3);
  const std::vector<uint8_t> s = make_symbols(rng, 64, 12, 4, 1);
  std::vector<uint8_t> a, b, c;
  RangeStreamEncoder e1, e2;
  e1.encode(s.data(), s.size(), 4, 64, a);
  e1.encode(s.data(), s.size(), 4, 64, b);  // the same encoder object again (reused scratch)
  e2.encode(s.data(), s.size(), 4, 64, c);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  HuffmanEncoder h1, h2;
  std::vector<uint8_t> x, y;
  h1.encode(s.data(), s.size(), 4, x, EntropyPolicy::Auto, 64);
  h2.encode(s.data(), s.size(), 4, y, EntropyPolicy::Auto, 64);
  EXPECT_EQ(x, y);
}

TEST(CodingRangeCoder, HuffmanPolicyIsTheOldEncoderAndAutoIsNeverLarger) {
  Rng rng(7);
  int auto_won = 0, cases = 0;
  for (int width = 1; width <= 8; ++width) {
    for (size_t seg : {size_t{1}, size_t{16}, size_t{128}}) {
      for (size_t n_seg : {size_t{1}, size_t{6}}) {
        for (int kind = 0; kind < 4; ++kind) {
          const std::vector<uint8_t> s = make_symbols(rng, seg, n_seg, width, kind);
          HuffmanEncoder enc;
          std::vector<uint8_t> plain, huff, aut;
          const StreamSizes sp = enc.encode(s.data(), s.size(), width, plain);
          const StreamSizes sh =
              enc.encode(s.data(), s.size(), width, huff, EntropyPolicy::Huffman, seg);
          const StreamSizes sa =
              enc.encode(s.data(), s.size(), width, aut, EntropyPolicy::Auto, seg);
          ASSERT_EQ(plain, huff);
          EXPECT_EQ(sp.total(), sh.total());
          ASSERT_LE(aut.size(), huff.size());
          ASSERT_EQ(static_cast<int64_t>(aut.size()), sa.total());
          EXPECT_EQ(sa.fixed_width_payload, sh.fixed_width_payload);
          if (sa.mode == StreamMode::Range) {
            ++auto_won;
            EXPECT_LT(aut.size(), huff.size());  // a tie keeps the older mode
          } else {
            EXPECT_EQ(aut, huff);
          }
          ASSERT_EQ(decode_all(aut, s.size(), width), s);
          ++cases;
        }
      }
    }
  }
  // Not a bound, a sanity check that the comparison above exercised both outcomes.
  EXPECT_GT(auto_won, 0);
  EXPECT_LT(auto_won, cases);
}

// Empirical order-0 entropy of s (bits per symbol).
double entropy_bits(const uint8_t* s, size_t n) {
  std::map<uint8_t, size_t> h;
  for (size_t i = 0; i < n; ++i) ++h[s[i]];
  double e = 0;
  for (const auto& [sym, c] : h) {
    const double p = static_cast<double>(c) / static_cast<double>(n);
    e -= p * std::log2(p);
  }
  return e;
}

TEST(CodingRangeCoder, ModeFourWinsWhereSegmentsDifferAndOneHuffmanTableCannot) {
  // Each segment is drawn from its own narrow distribution (95% one symbol, the rest its
  // neighbour), the peaks spread over the alphabet, so the pooled histogram is nearly flat while
  // every segment is highly predictable. Any single prefix code over the pooled symbols needs at
  // least the pooled order-0 entropy per symbol; mode 4 must get below that bound, which it can
  // only do by modelling the segments separately.
  Rng rng(13);
  for (int width : {1, 2, 3, 4, 6, 8}) {
    const uint32_t A = 1u << width;
    const size_t seg = 128, n_seg = 32;
    std::vector<uint8_t> s(seg * n_seg);
    for (size_t j = 0; j < n_seg; ++j) {
      const uint32_t peak = static_cast<uint32_t>((j * 7 + 3) % A);
      for (size_t i = 0; i < seg; ++i)
        s[j * seg + i] = static_cast<uint8_t>(rng.uniform() < 0.95 ? peak : (peak + 1) % A);
    }
    const double pooled_bound_bytes =
        entropy_bits(s.data(), s.size()) * static_cast<double>(s.size()) / 8.0;
    HuffmanEncoder enc;
    std::vector<uint8_t> huff, aut;
    const StreamSizes sh = enc.encode(s.data(), s.size(), width, huff);
    const StreamSizes sa = enc.encode(s.data(), s.size(), width, aut, EntropyPolicy::Auto, seg);
    EXPECT_GE(static_cast<double>(sh.payload), std::floor(pooled_bound_bytes));
    ASSERT_EQ(sa.mode, StreamMode::Range) << "width " << width;
    EXPECT_LT(static_cast<double>(sa.total()), pooled_bound_bytes) << "width " << width;
    EXPECT_EQ(decode_all(aut, s.size(), width), s);
  }
}

// ---------------------------------------------------------------------------------------------
// Malformed streams

std::vector<uint8_t> header(uint64_t count, uint64_t seg, uint8_t prior, uint64_t payload_size) {
  std::vector<uint8_t> b;
  put_u8(b, kRangeStreamMode);
  put_varint(b, count);
  put_varint(b, seg);
  put_u8(b, prior);
  put_varint(b, payload_size);
  return b;
}

void expect_refused(const std::vector<uint8_t>& bytes, size_t n, int width, const char* what) {
  for (bool ref : {false, true}) {
    EXPECT_THROW(decode_all(bytes, n, width, ref), FormatError) << what;
  }
}

TEST(CodingRangeCoder, RefusesMalformedStreams) {
  Rng rng(17);
  const int width = 3;
  const size_t seg = 10, n = 40;
  const std::vector<uint8_t> s = make_symbols(rng, seg, n / seg, width, 1);
  RangeStreamEncoder enc;
  std::vector<uint8_t> good;
  const RangeStreamSize sz = enc.encode_with_prior(s.data(), n, width, seg, 4, good);
  ASSERT_EQ(decode_all(good, n, width), s);
  const std::vector<uint8_t> payload(good.begin() + sz.overhead, good.end());
  ASSERT_FALSE(payload.empty());

  // Every truncation.
  for (size_t len = 0; len < good.size(); ++len) {
    expect_refused(std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(len)), n,
                   width, "truncated");
  }
  // Count mismatch (the stream says 40).
  EXPECT_THROW(decode_all(good, n + 1, width), FormatError);
  EXPECT_THROW(decode_all(good, n - 10, width), FormatError);
  // Segment length 0, not dividing the count, larger than the count.
  auto with = [&](uint64_t count, uint64_t sl, uint8_t prior) {
    std::vector<uint8_t> b = header(count, sl, prior, payload.size());
    b.insert(b.end(), payload.begin(), payload.end());
    return b;
  };
  ASSERT_EQ(with(n, seg, 4), good);
  expect_refused(with(n, 0, 4), n, width, "segment length 0");
  expect_refused(with(n, 3, 4), n, width, "segment length 3 does not divide 40");
  expect_refused(with(n, 80, 4), n, width, "segment length above the count");
  // Prior weight above the limit.
  expect_refused(with(n, seg, kRangeMaxPrior + 1), n, width, "prior weight");
  expect_refused(with(n, seg, 255), n, width, "prior weight");
  // Mode 4 with count 0.
  {
    std::vector<uint8_t> b = header(0, 1, 0, 1);
    b.push_back(1);
    expect_refused(b, 0, width, "count 0");
  }
  // Declared payload longer than the bytes present.
  {
    std::vector<uint8_t> b = header(n, seg, 4, payload.size() + 1);
    b.insert(b.end(), payload.begin(), payload.end());
    expect_refused(b, n, width, "payload size past the end");
  }
  // A trailing zero byte (not canonical: the encoder drops those).
  {
    std::vector<uint8_t> b = header(n, seg, 4, payload.size() + 1);
    b.insert(b.end(), payload.begin(), payload.end());
    b.push_back(0);
    expect_refused(b, n, width, "trailing zero byte");
  }
  // Far more payload than decoding 40 symbols can read: each symbol costs at most
  // log2(kRangeMaxTotal) = 16 bits, i.e. at most 2 renormalization bytes, so 40 symbols read at
  // most 4 + 80 bytes; 200 extra bytes cannot all be consumed whatever they decode to.
  {
    std::vector<uint8_t> p2 = payload;
    p2.insert(p2.end(), 200, 0x5A);
    std::vector<uint8_t> b = header(n, seg, 4, p2.size());
    b.insert(b.end(), p2.begin(), p2.end());
    expect_refused(b, n, width, "unread payload bytes");
  }
  // A code value outside the model's cumulative range: with width 1 the first model is (1, 1),
  // range 2^32 - 1 gives r = 2^31 - 1, and the value 0xFFFFFFFF maps to count 2 >= total 2.
  {
    std::vector<uint8_t> b = header(1, 1, 0, 4);
    for (int i = 0; i < 4; ++i) b.push_back(0xFF);
    expect_refused(b, 1, 1, "value outside the alphabet's range");
  }
  // Random corruption of the payload and header: refused with FormatError or decoded to symbols
  // inside the alphabet, never anything else (the hardened build adds ASan on top).
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> b = good;
    const size_t at = static_cast<size_t>(rng.below(b.size()));
    b[at] = static_cast<uint8_t>(b[at] ^ (1u << rng.below(8)));
    try {
      const std::vector<uint8_t> out = decode_all(b, n, width);
      for (uint8_t x : out) ASSERT_LT(x, 1u << width);
    } catch (const FormatError&) {
    }
  }
}

TEST(CodingRangeCoder, EncoderRejectsBadArguments) {
  const std::vector<uint8_t> s = {0, 1, 2, 3, 4, 5};
  RangeStreamEncoder enc;
  HuffmanEncoder h;
  std::vector<uint8_t> out;
  EXPECT_THROW(enc.encode(s.data(), 6, 2, 2, out), InvalidArgument);  // symbol 5 >= 4
  EXPECT_THROW(enc.encode(s.data(), 6, 3, 4, out), InvalidArgument);  // 4 does not divide 6
  EXPECT_THROW(enc.encode(s.data(), 6, 3, 0, out), InvalidArgument);
  EXPECT_THROW(enc.encode(s.data(), 0, 3, 1, out), InvalidArgument);
  EXPECT_THROW(enc.encode(s.data(), 6, 9, 1, out), InvalidArgument);
  EXPECT_THROW(enc.encode_with_prior(s.data(), 6, 3, 3, kRangeMaxPrior + 1, out), InvalidArgument);
  EXPECT_THROW(h.encode(s.data(), 6, 3, out, EntropyPolicy::Auto, 4), InvalidArgument);
  EXPECT_THROW(h.encode(s.data(), 6, 3, out, EntropyPolicy::Auto, 0), InvalidArgument);
}

}  // namespace
}  // namespace vq::coding

// ---------------------------------------------------------------------------------------------
// The PCA methods with entropy=auto

namespace {

/// [1, H, S, D] keys whose first latent direction is sparse (mostly exactly 0, rare large spikes)
/// while the others are uniform: with `uniform` allocation every component gets the same width,
/// so one Huffman table is shared by a very peaked component and flat ones.
vq::Tensor mixed_tensor(int64_t H, int64_t S, int64_t D, uint64_t seed) {
  vq::Rng rng(seed);
  vq::Tensor t(1, H, S, D);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t d = 0; d < D; ++d) {
        double v = 2.0 * rng.uniform() - 1.0;
        if (d == 0) v = rng.uniform() < 0.04 ? (rng.uniform() < 0.5 ? -40.0 : 40.0) : 0.0;
        t.at(0, h, s, d) = static_cast<float>(v);
      }
  return t;
}

TEST(CodingRangeCoderPca, CodecRoundTripIsIdenticalAndNeverLarger) {
  const int64_t D = 8;
  const vq::Tensor x = mixed_tensor(2, 300, D, 3);
  for (const char* base : {"kvtc:bit_budget=32,chunk_tokens=64", "uniform:bit_budget=32",
                           "svdq_split:bit_budget=24"}) {
    const std::string spec_h = std::string(base) + ",entropy=huffman";
    const std::string spec_a = std::string(base) + ",entropy=auto";
    auto ch = vq::make_codec(spec_h, D);
    auto ca = vq::make_codec(spec_a, D);
    const vq::EncodedBlock bh = ch->encode(x);
    const vq::EncodedBlock ba = ca->encode(x);
    const vq::Tensor yh = ch->decode(bh);
    const vq::Tensor ya = ca->decode(ba);
    // The entropy stage is lossless: both policies reconstruct the very same floats.
    ASSERT_EQ(yh.numel(), ya.numel());
    for (int64_t i = 0; i < yh.numel(); ++i) ASSERT_EQ(yh.data()[i], ya.data()[i]) << base;
    EXPECT_LE(ba.total_bytes(), bh.total_bytes()) << base;
    // Bytes are only moved between table and payload, never lost from the accounting.
    EXPECT_EQ(ba.breakdown().total(), ba.total_bytes()) << base;
    // A decoder made for the Huffman policy reads auto streams too (decoders accept mode 4).
    const vq::Tensor cross = ch->decode(ba);
    for (int64_t i = 0; i < yh.numel(); ++i) ASSERT_EQ(cross.data()[i], yh.data()[i]) << base;
  }
  // With uniform 4-bit components (one width group, the sparse component among flat ones),
  // per-component models must beat the shared table: the sparse component's codes are almost all
  // one level (~0.3 bit each) where the pooled code spends 2-3 bits on them.
  auto ch = vq::make_codec("uniform:bit_budget=32,chunk_tokens=128,entropy=huffman", D);
  auto ca = vq::make_codec("uniform:bit_budget=32,chunk_tokens=128,entropy=auto", D);
  const vq::ByteBreakdown bra = ca->encode(x).breakdown(), brh = ch->encode(x).breakdown();
  EXPECT_LT(bra.payload + bra.table, brh.payload + brh.table);
}

TEST(CodingRangeCoderPca, VqkvFileAndCacheRoundTripWithAuto) {
  const int64_t D = 8, H = 2, S = 200;
  const vq::Tensor x = mixed_tensor(H, S, D, 9);
  const std::vector<int64_t> shape = {H, S, D};
  vq::VqkvStats sh, sa;
  const auto fh = vq::vqkv_compress(x.data(), shape,
                                    vq::CacheConfig::parse("kvtc:bit_budget=24,entropy=huffman"),
                                    vq::NpyDtype::Float32, &sh);
  const auto fa =
      vq::vqkv_compress(x.data(), shape, vq::CacheConfig::parse("kvtc:bit_budget=24,entropy=auto"),
                        vq::NpyDtype::Float32, &sa);
  EXPECT_EQ(fa, vq::vqkv_compress(x.data(), shape,
                                  vq::CacheConfig::parse("kvtc:bit_budget=24,entropy=auto")));
  EXPECT_LE(sa.section_bytes, sh.section_bytes);
  const vq::VqkvArray ah = vq::vqkv_decompress(fh.data(), fh.size());
  const vq::VqkvArray aa = vq::vqkv_decompress(fa.data(), fa.size());
  ASSERT_EQ(aa.shape, shape);
  ASSERT_EQ(aa.values, ah.values);

  // The kvtc cache: the same reconstruction token by token, bytes never more than huffman.
  auto kh = vq::make_cache("kvtc:bit_budget=24,chunk_tokens=32,fit_tokens=64,entropy=huffman", D);
  auto ka = vq::make_cache("kvtc:bit_budget=24,chunk_tokens=32,fit_tokens=64,entropy=auto", D);
  vq::FetchResult rh, ra;
  for (int64_t s = 0; s < S; s += 25) {
    const vq::Tensor k = x.slice_tokens(s, 25);
    rh = kh->update_and_fetch(k, k);
    ra = ka->update_and_fetch(k, k);
    ASSERT_EQ(rh.keys.numel(), ra.keys.numel());
    for (int64_t i = 0; i < rh.keys.numel(); ++i) ASSERT_EQ(rh.keys.data()[i], ra.keys.data()[i]);
  }
  // The resident codes are the same fixed-width rows; the storage form is smaller with auto.
  EXPECT_EQ(ka->stats().content_bytes, kh->stats().content_bytes);
  EXPECT_LT(ka->stats().stored_bytes, kh->stats().stored_bytes);
  EXPECT_THROW(vq::CacheConfig::parse("kvtc:entropy=rans"), vq::InvalidArgument);
}

}  // namespace

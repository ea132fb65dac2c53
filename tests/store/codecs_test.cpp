// Resident row codecs (src/store/row_codec.hpp): every registered codec over the registry, plus
// the equalities with the storage coders they mirror (ggml bytes, KIVI and PCA decodes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "codecs/gear_codec.hpp"
#include "codecs/ggml_codec.hpp"
#include "codecs/kivi_codec.hpp"
#include "codecs/pca_codec.hpp"
#include "coding/ggml_blocks.hpp"
#include "core/rng.hpp"
#include "store/row_codec.hpp"
#include "store_util.hpp"
#include "transform/family_coders.hpp"
#include "transform/method_common.hpp"
#include "transform/pca_coder.hpp"
#include "transform/transform_cache.hpp"
#include "veloxquant/calibration.hpp"
#include "veloxquant/codec.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/tensor.hpp"

namespace {

using vq::store::RowCodec;
using vq::store::StreamInfo;

/// Rows [n, D] with a KV-like structure: a per-channel offset, a few strong shared directions
/// and a decaying per-channel noise, so that PCA, per-channel and per-token quantizers all see
/// realistic spectra (and a few large entries for GEAR's outliers).
std::vector<float> kv_rows(int64_t n, int64_t D, uint64_t seed) {
  vq::Rng rng(seed);
  const int64_t r = std::min<int64_t>(6, D);
  std::vector<double> mean(static_cast<size_t>(D)), dirs(static_cast<size_t>(r * D));
  for (auto& m : mean) m = 0.5 * rng.normal();
  for (auto& v : dirs) v = rng.normal();
  std::vector<float> x(static_cast<size_t>(n * D));
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> z(static_cast<size_t>(r));
    for (int64_t j = 0; j < r; ++j) z[static_cast<size_t>(j)] = rng.normal() * 2.0 / (1.0 + j);
    for (int64_t d = 0; d < D; ++d) {
      double v = mean[static_cast<size_t>(d)] + rng.normal() * 0.3 / (1.0 + 0.05 * d);
      for (int64_t j = 0; j < r; ++j)
        v += z[static_cast<size_t>(j)] * dirs[static_cast<size_t>(j * D + d)] * 0.3;
      x[static_cast<size_t>(t * D + d)] = static_cast<float>(v);
    }
    if (t % 7 == 3) x[static_cast<size_t>(t * D + (t * 13) % D)] *= 12.0f;  // a sparse outlier
  }
  return x;
}

std::vector<float> round_fp16_rows(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = vq::round_to_fp16(x[i]);
  return y;
}

/// Sizes of n rows split evenly into chunks of at most `chunk` (the store's rule for fit rows).
std::vector<int64_t> split_rows(int64_t n, int64_t chunk) {
  return vq::transform::even_chunks(n, chunk);
}

/// A byte buffer with guard bytes on both sides, to catch writes outside the given size.
class Guarded {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kPattern = 0xA5;
  explicit Guarded(size_t n, uint8_t fill = 0) : n_(n), buf_(n + 2 * kGuard, kPattern) {
    std::fill(buf_.begin() + kGuard, buf_.begin() + static_cast<ptrdiff_t>(kGuard + n), fill);
  }
  uint8_t* data() { return buf_.data() + kGuard; }
  const uint8_t* data() const { return buf_.data() + kGuard; }
  size_t size() const { return n_; }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (buf_[i] != kPattern || buf_[kGuard + n_ + i] != kPattern) return false;
    return true;
  }
  std::vector<uint8_t> bytes() const { return {data(), data() + n_}; }

 private:
  size_t n_;
  std::vector<uint8_t> buf_;
};

/// The same for floats (decode output).
class GuardedF {
 public:
  explicit GuardedF(size_t n) : n_(n), buf_(n + 32, 12345.0f) {}
  float* data() { return buf_.data() + 16; }
  bool guards_intact() const {
    for (size_t i = 0; i < 16; ++i)
      if (buf_[i] != 12345.0f || buf_[16 + n_ + i] != 12345.0f) return false;
    return true;
  }

 private:
  size_t n_;
  std::vector<float> buf_;
};

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, sizeof(float) * static_cast<size_t>(n)) == 0;
}

/// One stream coded the way the store codes it: fit on the first fit_rows() rows, those rows in
/// even chunks, then full chunks (row-wise codecs: one block of all rows).
struct Coded {
  struct Chunk {
    int64_t first = 0, n = 0;
    std::vector<uint8_t> params, codes;
  };
  std::vector<Chunk> chunks;
};

Coded code_stream(RowCodec& c, const std::vector<float>& x, int64_t n_rows,
                  bool check_guards = true) {
  const int64_t D = c.dim();
  Coded out;
  std::vector<int64_t> sizes;
  int64_t at = 0;
  if (c.fit_rows() > 0) {
    const int64_t f = std::min(c.fit_rows(), n_rows);
    c.fit(x.data(), f);
    sizes = split_rows(f, c.chunk_rows() > 0 ? c.chunk_rows() : f);
    at = f;
  }
  EXPECT_TRUE(c.fitted());
  const int64_t step = c.chunk_rows() > 0 ? c.chunk_rows() : std::max<int64_t>(1, n_rows - at);
  for (; at + step <= n_rows; at += step) sizes.push_back(step);
  int64_t first = 0;
  for (int64_t n : sizes) {
    const size_t pb = static_cast<size_t>(c.chunk_param_bytes(n));
    const size_t cb = static_cast<size_t>(n * c.row_bytes());
    // Encode into zero-filled and into 0xFF-filled buffers: equal results mean every one of
    // the declared bytes is written (and nothing past them, by the guards).
    Guarded p0(pb, 0x00), c0(cb, 0x00), p1(pb, 0xFF), c1(cb, 0xFF);
    c.encode(x.data() + first * D, n, pb ? p0.data() : nullptr, c0.data());
    c.encode(x.data() + first * D, n, pb ? p1.data() : nullptr, c1.data());
    if (check_guards) {
      EXPECT_TRUE(p0.guards_intact() && c0.guards_intact() && p1.guards_intact() &&
                  c1.guards_intact())
          << "encode wrote outside chunk_param_bytes(" << n << ") = " << pb
          << " / n * row_bytes = " << cb;
      EXPECT_EQ(p0.bytes(), p1.bytes())
          << "chunk params: some of the declared bytes are not written";
      EXPECT_EQ(c0.bytes(), c1.bytes()) << "row codes: some of the declared bytes are not written";
    }
    out.chunks.push_back({first, n, p0.bytes(), c0.bytes()});
    first += n;
  }
  return out;
}

int64_t coded_rows(const Coded& c) {
  return c.chunks.empty() ? 0 : c.chunks.back().first + c.chunks.back().n;
}

std::vector<float> decode_stream(const RowCodec& c, const Coded& coded) {
  const int64_t D = c.dim();
  std::vector<float> y(static_cast<size_t>(coded_rows(coded) * D));
  for (const auto& ch : coded.chunks)
    c.decode(ch.params.empty() ? nullptr : ch.params.data(), ch.codes.data(), ch.n,
             y.data() + ch.first * D);
  return y;
}

double rel_rms_error(const std::vector<float>& x, const std::vector<float>& y, int64_t n) {
  double e = 0, s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[static_cast<size_t>(i)]) - y[static_cast<size_t>(i)];
    e += d * d;
    s += static_cast<double>(x[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
  }
  return std::sqrt(e / s);
}

std::vector<const vq::MethodInfo*> codec_methods() {
  std::vector<const vq::MethodInfo*> out;
  for (const auto& m : vq::methods())
    if (m.make_row_codec) out.push_back(&m);
  return out;
}

StreamInfo stream(int64_t D, int kv, int64_t head = 0) {
  StreamInfo s;
  s.head_dim = D;
  s.layer = 0;
  s.head = head;
  s.n_heads = 2;
  s.kv = kv;
  s.seed = 7;
  return s;
}

/// Relative RMS error each method's default configuration must stay under on kv_rows: about
/// 1.25 x what it measured here at D = 64 and 128 (a regression guard; the PCA and KIVI codecs
/// are also checked against their storage coders below, which pins their arithmetic exactly).
/// The data is noise-heavy with sparse 12x outliers, so rank-dropping rules (svdq's 0-bit
/// groups, kvtc's DP dropping noise components) lose much of it; every bound is below 1, the
/// error of decoding nothing.
double error_bound(const std::string& id, int kv) {
  static const std::map<std::string, double> b = {
      {"q8_0", 0.01},    {"q4_0", 0.17},       {"kivi", 0.56}, {"kvtc", 0.45},
      {"uniform", 0.17}, {"svdq_split", 0.24}, {"palu", 0.56}, {"spectralquant", 0.7},
      {"svdq", 0.97},    {"gear", 0.5},
  };
  if (id == "svdq" && kv == 1) return 1e-3;  // values at fp16 (error against fp16 inputs: 0)
  if (id == "bf16") return 4e-3;             // 8 significant bits: at most 2^-9 per value
  if (id == "f32") return 5e-4;  // exact; the error is the fp16 rounding of the reference
  const auto it = b.find(id);
  return it == b.end() ? 0.0 : it->second;
}

TEST(RowCodecs, EveryTransformMethodRegistersOne) {
  std::vector<std::string> ids;
  for (const auto* m : codec_methods()) ids.push_back(m->id);
  for (const char* want : {"kvtc", "uniform", "svdq_split", "q8_0", "q4_0", "svdq", "palu",
                           "spectralquant", "gear", "kivi"})
    EXPECT_NE(std::find(ids.begin(), ids.end(), want), ids.end()) << want << " has no row codec";
  for (const auto& m : vq::methods()) {
    if (m.family == vq::Family::Transform) {
      EXPECT_TRUE(static_cast<bool>(m.make_row_codec)) << m.id;
    }
  }
}

class EveryCodec : public ::testing::TestWithParam<int64_t> {};

TEST_P(EveryCodec, RoundTripRowsAndBytes) {
  const int64_t D = GetParam();
  for (const auto* m : codec_methods()) {
    const vq::CacheConfig cfg = vq::CacheConfig::defaults(m->id);
    for (int kv = 0; kv < 2; ++kv) {
      SCOPED_TRACE(m->id + (kv == 0 ? " keys" : " values") + " D=" + std::to_string(D));
      auto c = m->make_row_codec(cfg, stream(D, kv));
      ASSERT_TRUE(c);
      ASSERT_EQ(c->dim(), D);
      // Enough rows for the fit and three more full chunks.
      const int64_t chunk = std::max<int64_t>(1, c->chunk_rows());
      const int64_t n = c->fit_rows() + 3 * chunk + (c->chunk_rows() == 0 ? 61 : 0);
      const std::vector<float> x = kv_rows(n, D, 1000 + static_cast<uint64_t>(D) + kv);
      const Coded coded = code_stream(*c, x, n);
      const int64_t got = coded_rows(coded);
      ASSERT_EQ(got, n);

      // Whole chunks decode within the method's error bound (inputs seen at fp16, as the
      // store's window holds them).
      const std::vector<float> y = decode_stream(*c, coded);
      const double err = rel_rms_error(round_fp16_rows(x), y, got * D);
      EXPECT_LE(err, error_bound(m->id, kv)) << "relative RMS error";
      std::printf("[err] %-14s %s D=%-4lld rel RMS %.4f\n", m->id.c_str(), kv ? "V" : "K",
                  static_cast<long long>(D), err);
      EXPECT_GT(error_bound(m->id, kv), 0.0) << "no error bound for this method";
      for (float v : y) ASSERT_TRUE(std::isfinite(v));

      // Single rows, in random order, decode to the same bits as their whole chunk.
      vq::Rng rng(99);
      for (const auto& ch : coded.chunks) {
        std::vector<int64_t> order(static_cast<size_t>(ch.n));
        std::iota(order.begin(), order.end(), int64_t{0});
        for (int64_t i = ch.n - 1; i > 0; --i)
          std::swap(order[static_cast<size_t>(i)],
                    order[static_cast<size_t>(rng.next_u64() % static_cast<uint64_t>(i + 1))]);
        for (int64_t t : order) {
          // The row's bytes alone, with guards: decode must not read outside them.
          Guarded row(static_cast<size_t>(c->row_bytes()));
          std::memcpy(row.data(), ch.codes.data() + t * c->row_bytes(),
                      static_cast<size_t>(c->row_bytes()));
          GuardedF out(static_cast<size_t>(D));
          c->decode(ch.params.empty() ? nullptr : ch.params.data(), row.data(), 1, out.data());
          ASSERT_TRUE(out.guards_intact()) << "decode wrote outside its row";
          ASSERT_TRUE(same_bits(out.data(), y.data() + (ch.first + t) * D, D))
              << "row " << t << " of the chunk at " << ch.first << " decodes differently alone";
        }
        // A run of rows in the middle of a chunk.
        if (ch.n >= 3) {
          std::vector<float> mid(static_cast<size_t>((ch.n - 2) * D));
          c->decode(ch.params.empty() ? nullptr : ch.params.data(),
                    ch.codes.data() + c->row_bytes(), ch.n - 2, mid.data());
          EXPECT_TRUE(same_bits(mid.data(), y.data() + (ch.first + 1) * D, (ch.n - 2) * D));
        }
      }

      // Determinism: a fresh codec given the same rows writes the same bytes.
      auto c2 = m->make_row_codec(cfg, stream(D, kv));
      const Coded again = code_stream(*c2, x, n, false);
      ASSERT_EQ(again.chunks.size(), coded.chunks.size());
      for (size_t i = 0; i < coded.chunks.size(); ++i) {
        EXPECT_EQ(again.chunks[i].params, coded.chunks[i].params);
        EXPECT_EQ(again.chunks[i].codes, coded.chunks[i].codes);
      }
      // The storage form is never larger than a few bytes over the resident form per chunk
      // (entropy coding falls back to fixed width), and never empty.
      for (const auto& ch : coded.chunks) {
        const int64_t stored = c->stored_chunk_bytes(ch.params.empty() ? nullptr : ch.params.data(),
                                                     ch.codes.data(), ch.n);
        EXPECT_GT(stored, 0);
        EXPECT_LE(stored, c->chunk_param_bytes(ch.n) + ch.n * c->row_bytes() + 64);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, EveryCodec, ::testing::Values(int64_t{64}, int64_t{128}));

TEST(RowCodecs, BadHeadDimIsRefusedWithItsValue) {
  for (const auto* m : codec_methods()) {
    const vq::CacheConfig cfg = vq::CacheConfig::defaults(m->id);
    for (int64_t D : {int64_t{0}, int64_t{-3}}) {
      try {
        auto c = m->make_row_codec(cfg, stream(D, 0));
        ADD_FAILURE() << m->id << " accepted head_dim " << D;
      } catch (const vq::InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(std::to_string(D)), std::string::npos)
            << m->id << ": " << e.what();
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// fp16 / bf16

std::vector<uint32_t> float_patterns() {
  std::vector<uint32_t> v = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
                             0x7F800001u, 0xFFC12345u, 0x7FFFFFFFu, 0x477FE000u, 0x477FF000u,
                             0x477FEFFFu, 0x38800000u, 0x387FFFFFu, 0x33800000u, 0x33000000u,
                             0x33000001u, 0x00000001u, 0x3F801000u, 0x3F803000u, 0x3F802000u};
  vq::Rng rng(5);
  for (int i = 0; i < 20000; ++i) v.push_back(static_cast<uint32_t>(rng.next_u64()));
  for (int i = 0; i < 20000; ++i)  // around the fp16 range, where rounding matters
    v.push_back(0x30000000u + static_cast<uint32_t>(rng.next_u64() % 0x18000000u));
  return v;
}

TEST(Fp16Conversion, BulkMatchesScalarBitForBit) {
  const std::vector<uint32_t> pats = float_patterns();
  std::vector<float> f(pats.size() + 1);
  std::memcpy(f.data() + 1, pats.data(), 4 * pats.size());  // unaligned start
  std::vector<uint16_t> h(pats.size() + 1);
  for (size_t len : {pats.size(), size_t{7}, size_t{9}, size_t{1}}) {
    vq::store::fp32_to_fp16_n(f.data() + 1, h.data() + 1, static_cast<int64_t>(len));
    for (size_t i = 0; i < len; ++i)
      ASSERT_EQ(h[i + 1], vq::fp32_to_fp16(f[i + 1])) << std::hex << pats[i];
  }
  std::vector<uint16_t> all(65536 + 1);
  for (uint32_t i = 0; i < 65536; ++i) all[i + 1] = static_cast<uint16_t>(i);
  std::vector<float> back(65536 + 1);
  vq::store::fp16_to_fp32_n(all.data() + 1, back.data() + 1, 65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    const float want = vq::fp16_to_fp32(static_cast<uint16_t>(i));
    ASSERT_TRUE(same_bits(&back[i + 1], &want, 1)) << std::hex << i;
  }
}

TEST(Bf16Conversion, BulkMatchesScalarBitForBit) {
  const std::vector<uint32_t> pats = float_patterns();
  std::vector<float> f(pats.size());
  std::memcpy(f.data(), pats.data(), 4 * pats.size());
  std::vector<uint16_t> h(pats.size());
  vq::store::fp32_to_bf16_n(f.data(), h.data(), static_cast<int64_t>(f.size()));
  for (size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(h[i], vq::fp32_to_bf16(f[i])) << std::hex << pats[i];
    if (std::isnan(f[i])) {
      const float back = vq::bf16_to_fp32(h[i]);
      ASSERT_TRUE(std::isnan(back)) << "NaN must stay NaN: " << std::hex << pats[i];
    }
  }
  std::vector<float> back(f.size());
  vq::store::bf16_to_fp32_n(h.data(), back.data(), static_cast<int64_t>(h.size()));
  for (size_t i = 0; i < f.size(); ++i) {
    const float want = vq::bf16_to_fp32(h[i]);
    ASSERT_TRUE(same_bits(&back[i], &want, 1));
  }
}

TEST(Fp16Codec, RowsAreFp16AndGeometryIsKept) {
  vq::store::Fp16Codec c(64, 128, 16, 4, 256);
  EXPECT_EQ(c.row_bytes(), 128);
  EXPECT_EQ(c.chunk_rows(), 128);
  EXPECT_EQ(c.recent_rows(), 16);
  EXPECT_EQ(c.sink_rows(), 4);
  EXPECT_EQ(c.fit_rows(), 256);
  EXPECT_FALSE(c.fitted());
  const std::vector<float> x = kv_rows(5, 64, 3);
  c.fit(x.data(), 5);
  EXPECT_TRUE(c.fitted());
  std::vector<uint8_t> codes(5 * 128);
  c.encode(x.data(), 5, nullptr, codes.data());
  std::vector<float> y(5 * 64);
  c.decode(nullptr, codes.data(), 5, y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(y[i], vq::round_to_fp16(x[i]));
    EXPECT_EQ(static_cast<uint16_t>(codes[2 * i] | (codes[2 * i + 1] << 8)),
              vq::fp32_to_fp16(x[i]));
  }
  vq::store::Bf16Codec b(64);
  b.encode(x.data(), 5, nullptr, codes.data());
  b.decode(nullptr, codes.data(), 5, y.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], vq::bf16_to_fp32(vq::fp32_to_bf16(x[i])));
}

// ---------------------------------------------------------------------------------------------
// q8_0 / q4_0

std::vector<float> ggml_inputs(int64_t n, uint64_t seed) {
  std::vector<float> x = kv_rows(n / 128 + 1, 128, seed);
  x.resize(static_cast<size_t>(n));
  // Edge cases: an all-zero block, ties of the largest magnitude with both signs, halfway values.
  for (int j = 0; j < 32; ++j) x[static_cast<size_t>(j)] = 0.0f;
  x[40] = 3.0f, x[41] = -3.0f, x[42] = 1.5f;
  for (int j = 64; j < 96; ++j) x[static_cast<size_t>(j)] = static_cast<float>(j - 80) * 0.5f;
  return x;
}

TEST(GgmlCodec, Block32IsLlamaCppBytesWithinEachHead) {
  for (auto type : {vq::coding::GgmlType::Q8_0, vq::coding::GgmlType::Q4_0}) {
    const char* id = type == vq::coding::GgmlType::Q8_0 ? "q8_0" : "q4_0";
    SCOPED_TRACE(id);
    const vq::CacheConfig cfg = vq::CacheConfig::defaults(id);
    for (int64_t D : {int64_t{32}, int64_t{64}, int64_t{128}}) {
      auto c = vq::find_method(id).make_row_codec(cfg, stream(D, 0));
      EXPECT_EQ(c->row_bytes(), vq::coding::ggml_row_bytes(type, D));
      EXPECT_EQ(c->chunk_rows(), 0);
      const int64_t n = 9;
      const std::vector<float> x = ggml_inputs(n * D, 11);
      std::vector<uint8_t> codes(static_cast<size_t>(n * c->row_bytes()));
      c->encode(x.data(), n, nullptr, codes.data());
      std::vector<uint8_t> ref(codes.size());
      for (int64_t t = 0; t < n; ++t)  // llama.cpp: one head's row of D values per block run
        vq::coding::ggml_quantize_row(type, x.data() + t * D, D, ref.data() + t * c->row_bytes());
      EXPECT_EQ(codes, ref);
      // The generalized block quantizer at block 32 is the same bytes too.
      std::vector<uint8_t> gen(codes.size());
      vq::coding::ggml_quantize_blocks(type, 32, x.data(), n * D, gen.data());
      EXPECT_EQ(gen, ref);
      std::vector<float> y(static_cast<size_t>(n * D)), yr(y.size());
      c->decode(nullptr, codes.data(), n, y.data());
      for (int64_t t = 0; t < n; ++t)
        vq::coding::ggml_dequantize_row(type, ref.data() + t * c->row_bytes(), D,
                                        yr.data() + t * D);
      EXPECT_TRUE(same_bits(y.data(), yr.data(), n * D));
      EXPECT_FALSE(c->quantizes_queries());
    }
  }
}

TEST(GgmlCodec, SmallBlocksAreVariantsWithTheSameFormulas) {
  for (auto type : {vq::coding::GgmlType::Q8_0, vq::coding::GgmlType::Q4_0}) {
    const std::vector<float> x = ggml_inputs(2 * 48, 4);
    double prev_err = 1e9;
    for (int64_t block : {int64_t{32}, int64_t{16}, int64_t{8}}) {
      const int64_t D = block == 32 ? 64 : 48;
      vq::codecs::GgmlCodec c(type, D, block, false, true);
      EXPECT_EQ(c.row_bytes(),
                D / block * (2 + (type == vq::coding::GgmlType::Q8_0 ? block : block / 2)));
      std::vector<uint8_t> codes(static_cast<size_t>(c.row_bytes()));
      std::vector<float> y(static_cast<size_t>(D));
      c.encode(x.data(), 1, nullptr, codes.data());
      c.decode(nullptr, codes.data(), 1, y.data());
      // Each block's scale comes from its own values: the block's largest magnitude is exact
      // (q8_0: 127 d = amax up to fp16 rounding of d; q4_0: -8 d = the signed maximum).
      for (int64_t b0 = 0; b0 < D; b0 += block) {
        float amax = 0, ymax = 0;
        for (int64_t j = b0; j < b0 + block; ++j) {
          amax = std::max(amax, std::fabs(x[static_cast<size_t>(j)]));
          ymax = std::max(ymax, std::fabs(y[static_cast<size_t>(j)]));
        }
        EXPECT_NEAR(ymax, amax, amax * 2e-3 + 1e-30) << "block at " << b0;
      }
      if (block < 32) {
        const double err = rel_rms_error(std::vector<float>(x.begin(), x.begin() + D), y, D);
        EXPECT_LT(err, prev_err * 1.5) << "block " << block;
        prev_err = err;
      }
    }
  }
}

TEST(GgmlCodec, HeadDimNotMultipleOfBlockIsRefused) {
  const vq::CacheConfig cfg = vq::CacheConfig::parse("q4_0");
  try {
    vq::find_method("q4_0").make_row_codec(cfg, stream(48, 0));
    ADD_FAILURE() << "head_dim 48 accepted with block=32";
  } catch (const vq::InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("48"), std::string::npos) << msg;
    EXPECT_NE(msg.find("multiple of 32"), std::string::npos) << msg;
    EXPECT_NE(msg.find("inside one head"), std::string::npos) << msg;
    EXPECT_NE(msg.find("block=16"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(vq::find_method("q4_0").make_row_codec(vq::CacheConfig::parse("q4_0:block=16"),
                                                         stream(48, 0)));
  try {
    vq::find_method("q8_0").make_row_codec(vq::CacheConfig::parse("q8_0:block=16"), stream(20, 0));
    ADD_FAILURE() << "head_dim 20 accepted with block=16";
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("20"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("block = 16"), std::string::npos) << e.what();
  }
}

TEST(GgmlCodec, QueryRoundingIsReportedForKeysOnly) {
  const auto& m = vq::find_method("q8_0");
  auto k = m.make_row_codec(vq::CacheConfig::parse("q8_0:quant_q=true,block=16"), stream(64, 0));
  auto v = m.make_row_codec(vq::CacheConfig::parse("q8_0:quant_q=true,block=16"), stream(64, 1));
  EXPECT_TRUE(k->quantizes_queries());
  EXPECT_EQ(k->query_block(), 16);
  EXPECT_FALSE(v->quantizes_queries());
  auto d = m.make_row_codec(vq::CacheConfig::parse("q8_0"), stream(64, 0));
  EXPECT_FALSE(d->quantizes_queries());
  EXPECT_EQ(d->query_block(), 32);
}

// ---------------------------------------------------------------------------------------------
// KIVI against KiviRowCoder

TEST(KiviCodec, DecodesExactlyWhatTheStorageCoderDecodes) {
  for (const char* spec : {"kivi", "kivi:bits=4,group=16", "kivi:bits=3,group=24"}) {
    const vq::CacheConfig cfg = vq::CacheConfig::parse(spec);
    const int bits = static_cast<int>(cfg.get_int("bits"));
    const int64_t group = cfg.get_int("group");
    for (int64_t D : {int64_t{64}, int64_t{128}, int64_t{40}}) {
      for (int kv = 0; kv < 2; ++kv) {
        SCOPED_TRACE(std::string(spec) + " D=" + std::to_string(D) + (kv ? " values" : " keys"));
        auto c = vq::find_method("kivi").make_row_codec(cfg, stream(D, kv));
        EXPECT_EQ(c->chunk_rows(), group);
        EXPECT_EQ(c->recent_rows(), cfg.get_int("residual"));
        const std::vector<float> x = kv_rows(group, D, 21 + static_cast<uint64_t>(D));
        const std::vector<float> x16 = round_fp16_rows(x);
        std::vector<uint8_t> params(static_cast<size_t>(c->chunk_param_bytes(group)));
        std::vector<uint8_t> codes(static_cast<size_t>(group * c->row_bytes()));
        c->encode(x.data(), group, params.data(), codes.data());
        std::vector<float> y(x.size());
        c->decode(params.data(), codes.data(), group, y.data());
        vq::transform::KiviRowCoder ref(D, kv == 0, bits, group);
        vq::EncodedSection sec;
        ref.encode_chunk(x16.data(), group, sec);
        std::vector<float> yr(x.size());
        vq::coding::ByteReader in(sec.bytes.data(), sec.bytes.size());
        ASSERT_EQ(ref.decode_chunk(in, group, yr.data()), group);
        EXPECT_TRUE(same_bits(y.data(), yr.data(), group * D));
        EXPECT_EQ(c->stored_chunk_bytes(params.data(), codes.data(), group),
                  static_cast<int64_t>(sec.bytes.size()));
        const int64_t groups = (D + group - 1) / group;
        EXPECT_EQ(c->row_bytes(), (kv == 0 ? 0 : 8 * groups) + (D * bits + 7) / 8);
        EXPECT_EQ(c->chunk_param_bytes(group), kv == 0 ? 8 * D : 0);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// PCA family against the existing storage coders

struct PcaCompare {
  int64_t values = 0, exact = 0;
  double max_rel = 0;  // largest |a - b| / max |row|
};

/// Fit the resident codec on all S rows and code them in even chunks, exactly as the method's
/// block codec does; check the storage sizes and compare the decoded floats.
PcaCompare compare_with_block_codec(const std::string& spec, int64_t D, int64_t S, uint64_t seed) {
  const vq::CacheConfig cfg = vq::CacheConfig::parse(spec);
  const auto& m = vq::find_method(cfg.method());
  auto c = m.make_row_codec(cfg, stream(D, 0));
  const std::vector<float> x = kv_rows(S, D, seed);
  c->fit(x.data(), S);
  const int64_t chunk = c->chunk_rows();
  std::vector<float> y(x.size());
  int64_t stored = c->stored_header_bytes(), first = 0;
  for (int64_t n : split_rows(S, chunk)) {
    std::vector<uint8_t> params(static_cast<size_t>(c->chunk_param_bytes(n)));
    std::vector<uint8_t> codes(static_cast<size_t>(n * c->row_bytes()));
    c->encode(x.data() + first * D, n, params.data(), codes.data());
    c->decode(params.data(), codes.data(), n, y.data() + first * D);
    stored += c->stored_chunk_bytes(params.data(), codes.data(), n);
    first += n;
  }
  auto block = m.make_codec(cfg, D);
  const vq::EncodedBlock blk = block->encode(x.data(), 1, S);
  EXPECT_EQ(stored, static_cast<int64_t>(blk.sections.at(0).bytes.size()))
      << spec << ": stored_header_bytes + stored_chunk_bytes differ from the section size";
  std::vector<float> yr(x.size());
  block->decode(blk, yr.data());
  PcaCompare r;
  for (int64_t t = 0; t < S; ++t) {
    float scale = 0;
    for (int64_t d = 0; d < D; ++d)
      scale = std::max(scale, std::fabs(yr[static_cast<size_t>(t * D + d)]));
    for (int64_t d = 0; d < D; ++d) {
      const size_t i = static_cast<size_t>(t * D + d);
      ++r.values;
      r.exact += same_bits(&y[i], &yr[i], 1) ? 1 : 0;
      r.max_rel = std::max(r.max_rel, std::fabs(static_cast<double>(y[i]) - yr[i]) / scale);
    }
  }
  return r;
}

TEST(PcaCodec, ReproducesTheStorageCoderDecode) {
  for (const char* spec :
       {"kvtc", "kvtc:bit_budget=160,chunk_tokens=64", "kvtc:alloc=waterfill", "kvtc:entropy=auto",
        "uniform", "svdq_split", "palu", "palu:rank=16", "spectralquant", "svdq"}) {
    for (int64_t D : {int64_t{64}, int64_t{128}, int64_t{20}}) {
      SCOPED_TRACE(std::string(spec) + " D=" + std::to_string(D));
      const PcaCompare r = compare_with_block_codec(spec, D, 3 * D + 17, 77);
      // Same codes and parameters, dequantized and un-projected by the same kernels: the same
      // floats, bit for bit.
      EXPECT_EQ(r.exact, r.values) << "max diff / row max " << r.max_rel;
      std::printf("[pca] %-36s D=%-4lld bit-identical %lld / %lld, max diff / row max %.2e\n", spec,
                  static_cast<long long>(D), static_cast<long long>(r.exact),
                  static_cast<long long>(r.values), r.max_rel);
    }
  }
}

TEST(PcaCodec, LayoutAndGeometryFollowTheOptions) {
  const auto& kvtc = vq::find_method("kvtc");
  auto c = kvtc.make_row_codec(
      vq::CacheConfig::parse("kvtc:chunk_tokens=64,sink_tokens=4,recent_tokens=32,rope=pre"),
      stream(64, 0));
  EXPECT_EQ(c->chunk_rows(), 64);
  EXPECT_EQ(c->fit_rows(), 128);  // fit_tokens = 0 resolves to 2 x head_dim
  EXPECT_EQ(c->sink_rows(), 4);
  EXPECT_EQ(c->recent_rows(), 32);
  EXPECT_TRUE(c->wants_pre_rope());
  EXPECT_FALSE(c->fitted());
  const std::vector<float> x = kv_rows(128, 64, 5);
  c->fit(x.data(), 128);
  auto* p = dynamic_cast<vq::codecs::PcaCodec*>(c.get());
  ASSERT_NE(p, nullptr);
  int64_t bits = 0;
  for (uint8_t w : p->widths()) bits += w;
  EXPECT_LE(bits, 4 * 64);  // bit_budget = 0 -> 4 x head_dim bits per token
  EXPECT_EQ(c->row_bytes(), (bits + 7) / 8);
  EXPECT_EQ(c->chunk_param_bytes(64), 8 * p->kept());
  EXPECT_GE(c->state_bytes(), 4 * 64 * (1 + p->kept()));
  EXPECT_EQ(c->stored_header_bytes(), 1 + 1 + 1 + p->kept() + 4 * 64 * (1 + p->kept()));
  EXPECT_EQ(c->external_bytes(), 0);
  EXPECT_EQ(c->external_entry(), -1);
  // svdq: keys are PCA, values an fp16 stream with the keys' chunk geometry.
  const auto& svdq = vq::find_method("svdq");
  auto k = svdq.make_row_codec(vq::CacheConfig::defaults("svdq"), stream(64, 0));
  auto v = svdq.make_row_codec(vq::CacheConfig::defaults("svdq"), stream(64, 1));
  EXPECT_NE(dynamic_cast<vq::codecs::PcaCodec*>(k.get()), nullptr);
  EXPECT_NE(dynamic_cast<vq::store::Fp16Codec*>(v.get()), nullptr);
  EXPECT_EQ(k->chunk_rows(), v->chunk_rows());
  EXPECT_EQ(k->fit_rows(), v->fit_rows());
  EXPECT_EQ(v->row_bytes(), 128);
}

TEST(PcaCodec, CalibratedBasisIsExternalAndMatchesTheCache) {
  const int64_t D = 32, H = 2, L = 1;
  vq::Calibration cal;
  cal.n_layers = L;
  cal.n_kv_heads = H;
  cal.head_dim = D;
  cal.tokens = 256;
  cal.chunk_tokens = 64;
  for (int64_t e = 0; e < L * H * 2; ++e) {
    const std::vector<float> x = kv_rows(256, D, 300 + static_cast<uint64_t>(e));
    cal.entries.push_back(vq::fit_calibration_entry(x.data(), 256, D, 64));
  }
  const std::string path = ::testing::TempDir() + "codecs_test.vqcal";
  cal.save(path);
  for (const char* q : {"chunk", "calibrated"}) {
    SCOPED_TRACE(q);
    const vq::CacheConfig cfg =
        vq::CacheConfig::parse("kvtc:chunk_tokens=64,basis=" + path + ",quant=" + q);
    const auto& kvtc = vq::find_method("kvtc");
    StreamInfo s = stream(D, 1, 1);
    auto c = kvtc.make_row_codec(cfg, s);
    EXPECT_EQ(c->fit_rows(), 0);  // the model is given
    EXPECT_TRUE(c->fitted());
    EXPECT_GT(c->external_bytes(), 0);
    EXPECT_EQ(c->external_entry(), cal.entry_index(0, 1, 1));
    EXPECT_EQ(c->chunk_param_bytes(64),
              std::string(q) == "chunk" ? 8 * dynamic_cast<vq::codecs::PcaCodec&>(*c).kept() : 0);
    // Against the storage coder of the same stream, fed the same 64-row chunk.
    const std::vector<float> x = kv_rows(64, D, 999);
    std::vector<uint8_t> params(static_cast<size_t>(c->chunk_param_bytes(64)));
    std::vector<uint8_t> codes(static_cast<size_t>(64 * c->row_bytes()));
    c->encode(x.data(), 64, params.empty() ? nullptr : params.data(), codes.data());
    std::vector<float> y(x.size());
    c->decode(params.empty() ? nullptr : params.data(), codes.data(), 64, y.data());
    vq::transform::PcaSettings st =
        vq::transform::pca_settings(cfg, D, vq::transform::AllocRule::Dp, true);
    st.quant_calibrated = std::string(q) == "calibrated";
    st.calibration = vq::load_calibration_shared(path);
    st.calibration_id = st.calibration->id();
    const vq::transform::StreamId id{0, 1, 1, H};
    vq::transform::PcaRowCoder enc(D, st, id), dec(D, st, id);
    vq::EncodedSection sec;
    enc.fit(nullptr, 0, sec);
    const size_t header = sec.bytes.size();
    EXPECT_EQ(c->stored_header_bytes(), static_cast<int64_t>(header));
    enc.encode_chunk(x.data(), 64, sec);
    EXPECT_EQ(c->stored_chunk_bytes(params.empty() ? nullptr : params.data(), codes.data(), 64),
              static_cast<int64_t>(sec.bytes.size() - header));
    vq::coding::ByteReader in(sec.bytes.data(), sec.bytes.size());
    dec.read_header(in);
    std::vector<float> yr(x.size());
    ASSERT_EQ(dec.decode_chunk(in, 64, yr.data()), 64);
    EXPECT_TRUE(same_bits(y.data(), yr.data(), static_cast<int64_t>(y.size())))
        << "the resident decode differs from the storage decode";
  }
  // A calibration of another head count is refused, naming both counts.
  try {
    StreamInfo s = stream(D, 0);
    s.n_heads = 3;
    vq::find_method("kvtc").make_row_codec(vq::CacheConfig::parse("kvtc:basis=" + path), s);
    ADD_FAILURE() << "n_heads mismatch accepted";
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("3 KV heads"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// GEAR

TEST(GearCodec, OutliersAreExactAndTheLowRankTermHelps) {
  const int64_t D = 64, n = 128;
  const std::vector<float> x = kv_rows(n, D, 8);
  const std::vector<float> x16 = round_fp16_rows(x);
  double err_rank0 = 0, err_rank4 = 0;
  for (int64_t rank : {int64_t{0}, int64_t{4}}) {
    vq::codecs::GearCodec c(D, 2, rank, 0.05, 128, 128);
    EXPECT_EQ(c.outliers_per_row(), 3);  // round(0.05 * 64)
    EXPECT_EQ(c.row_bytes(), 8 + 4 * 3 + 2 * rank + 16);
    EXPECT_EQ(c.chunk_param_bytes(n), 2 * rank * D);
    std::vector<uint8_t> params(static_cast<size_t>(c.chunk_param_bytes(n)));
    std::vector<uint8_t> codes(static_cast<size_t>(n * c.row_bytes()));
    c.encode(x16.data(), n, params.data(), codes.data());
    std::vector<float> y(x.size());
    c.decode(params.data(), codes.data(), n, y.data());
    for (int64_t t = 0; t < n; ++t) {  // the row's largest magnitude is kept at fp16
      int64_t arg = 0;
      for (int64_t d = 1; d < D; ++d)
        if (std::fabs(x16[static_cast<size_t>(t * D + d)]) >
            std::fabs(x16[static_cast<size_t>(t * D + arg)]))
          arg = d;
      EXPECT_EQ(y[static_cast<size_t>(t * D + arg)], x16[static_cast<size_t>(t * D + arg)]);
    }
    (rank == 0 ? err_rank0 : err_rank4) = rel_rms_error(x16, y, n * D);
  }
  EXPECT_LT(err_rank4, err_rank0);
}

TEST(GearCodec, ErrorIsCloseToTheStorageCoders) {
  // Same bits, rank and outlier share; the resident form picks outliers per row instead of per
  // chunk, so its error may differ a little, never by much.
  for (int64_t D : {int64_t{64}, int64_t{128}}) {
    const int64_t n = 128;
    const std::vector<float> x16 = round_fp16_rows(kv_rows(n, D, 31));
    vq::codecs::GearCodec c(D, 2, 4, 0.01, 128, 128);
    std::vector<uint8_t> params(static_cast<size_t>(c.chunk_param_bytes(n)));
    std::vector<uint8_t> codes(static_cast<size_t>(n * c.row_bytes()));
    c.encode(x16.data(), n, params.data(), codes.data());
    std::vector<float> y(x16.size()), yr(x16.size());
    c.decode(params.data(), codes.data(), n, y.data());
    vq::transform::GearRowCoder ref(D, 2, 4, 0.01);
    vq::EncodedSection sec;
    ref.fit(nullptr, 0, sec);
    ref.encode_chunk(x16.data(), n, sec);
    vq::coding::ByteReader in(sec.bytes.data(), sec.bytes.size());
    ref.read_header(in);
    ASSERT_EQ(ref.decode_chunk(in, n, yr.data()), n);
    const double e = rel_rms_error(x16, y, n * D), er = rel_rms_error(x16, yr, n * D);
    std::printf("[gear] D=%lld resident %.4f storage %.4f\n", static_cast<long long>(D), e, er);
    EXPECT_LE(e, er * 1.1);
  }
}

}  // namespace

namespace {

// A store keeps each chunk's storage-form size once bytes() has computed it, until the chunk's
// rows change. A cache asked for its stats after every token must therefore report what an
// identical cache asked only once, at the end, reports, through evictions that take rows out of
// encoded chunks and through new chunks.
TEST(StoreBytes, KeptStoredSizesFollowEvictionsFromChunks) {
  const int64_t D = 16, H = 2, T = 160;
  // recent=8: the newest tokens stay, so the evicted ones are older rows, held in chunks
  const std::string spec = "h2o:budget=40,recent=8+kvtc:bit_budget=32,chunk_tokens=8";
  auto asked = vq::make_cache(spec, D), once = vq::make_cache(spec, D);
  const std::vector<float> k = kv_rows(T * H, D, 11), v = kv_rows(T * H, D, 12);
  double last = -1;
  int changes = 0;
  for (int64_t t = 0; t < T; ++t) {
    vq::Tensor K(1, H, 1, D), V(1, H, 1, D);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        K.row(0, h, 0)[d] = k[static_cast<size_t>((t * H + h) * D + d)];
        V.row(0, h, 0)[d] = v[static_cast<size_t>((t * H + h) * D + d)];
      }
    asked->update(K, V);
    once->update(K, V);
    const double stored = asked->stats().stored_bytes;
    if (t >= 40 && stored != last) ++changes;  // at the budget: rows leave chunks
    last = stored;
  }
  ASSERT_GT(changes, 0) << "the stored size never moved once the cache was full";
  EXPECT_DOUBLE_EQ(asked->stats().stored_bytes, once->stats().stored_bytes);
  EXPECT_GT(storetest::head_store(*asked).bytes().chunks, 0);
}

}  // namespace

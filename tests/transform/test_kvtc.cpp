// KVTC on one [S, D] block (the PCA coder) and the kvtc cache: PCA correctness, exact inverse at
// a generous budget, 0-bit components not stored, DP beats the fixed split on the skewed geometry,
// basis and allocation frozen after the first fit, raw window and chunking, byte accounting, and
// compression ratio > 1 for K and V on a long low-rank sequence.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "codecs/pca_codec.hpp"
#include "core/rng.hpp"
#include "eval/bench_kvtc.hpp"
#include "store/store_util.hpp"
#include "transform/pca_coder.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/codec.hpp"
#include "veloxquant/errors.hpp"

namespace vq::transform {
namespace {

/// Rank-`rank` data [1, H, S, D] with decaying component scales plus small noise, fp16-rounded.
Tensor low_rank(int64_t H, int64_t S, int64_t D, int64_t rank, uint64_t seed, double noise = 0.01,
                double offset = 0.0) {
  Rng rng(seed);
  Tensor x(1, H, S, D);
  for (int64_t h = 0; h < H; ++h) {
    std::vector<double> M(static_cast<size_t>(rank * D));
    for (int64_t i = 0; i < rank; ++i)
      for (int64_t d = 0; d < D; ++d)
        M[static_cast<size_t>(i * D + d)] = rng.normal() * 4.0 / static_cast<double>(i + 1);
    for (int64_t t = 0; t < S; ++t) {
      std::vector<double> z(static_cast<size_t>(rank));
      for (auto& v : z) v = rng.normal();
      for (int64_t d = 0; d < D; ++d) {
        double s = offset + noise * rng.normal();
        for (int64_t i = 0; i < rank; ++i)
          s += z[static_cast<size_t>(i)] * M[static_cast<size_t>(i * D + d)];
        x.at(0, h, t, d) = round_to_fp16(static_cast<float>(s));
      }
    }
  }
  return x;
}

double rel_mse(const Tensor& a, const Tensor& b) {
  double e = 0, n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = static_cast<double>(a.data()[i]) - b.data()[i];
    e += d * d;
    n += static_cast<double>(a.data()[i]) * a.data()[i];
  }
  return e / n;
}

PcaSettings dp_settings(int64_t budget) {
  PcaSettings s;
  s.rule = AllocRule::Dp;
  s.bit_budget = budget;
  s.bit_choices = {0, 1, 2, 3, 4, 6, 8};
  s.beta = 3.5;
  return s;
}

const codecs::PcaCodec& pca_codec(const KVCache& c, int64_t b, int64_t h, int kv) {
  return storetest::codec<codecs::PcaCodec>(c, b, h, kv);
}

// Every kept component's width, as a list of ints.
std::vector<int> widths(const KVCache& c, int64_t b, int64_t h, int kv) {
  const auto& w = pca_codec(c, b, h, kv).widths();
  return std::vector<int>(w.begin(), w.end());
}

TEST(KvtcPca, BasisIsOrthonormalAndVariancesAreTheProjectedVariances) {
  const int64_t S = 300, D = 12;
  const Tensor x = vq::bench::make_kvtc_geometry("skewed_variance", S, D, 4);
  const PcaModel m = fit_pca_model(x.data(), S, D, dp_settings(8 * D));  // every component kept
  ASSERT_EQ(m.kept(), D);
  ASSERT_EQ(static_cast<int64_t>(m.variances.size()), D);
  Eigen::Map<const Eigen::Matrix<float, -1, -1, Eigen::RowMajor>> B(m.basis.data(), D, D);
  const Eigen::MatrixXd G = (B.cast<double>() * B.cast<double>().transpose());
  EXPECT_LT((G - Eigen::MatrixXd::Identity(D, D)).cwiseAbs().maxCoeff(), 1e-5);
  for (int64_t j = 0; j < D; ++j) {
    if (j > 0) {
      EXPECT_GE(m.variances[static_cast<size_t>(j - 1)], m.variances[static_cast<size_t>(j)]);
    }
    double var = 0;
    for (int64_t t = 0; t < S; ++t) {
      double p = 0;
      for (int64_t d = 0; d < D; ++d)
        p += (static_cast<double>(x.at(0, 0, t, d)) - m.mean[static_cast<size_t>(d)]) * B(j, d);
      var += p * p;
    }
    var /= S;
    EXPECT_NEAR(var, m.variances[static_cast<size_t>(j)], 1e-4 * (m.variances[0] + 1e-12)) << j;
  }
}

// Fits over >= 512 rows take the blocked fp32 covariance (fit_pca_model): the variances are
// still the basis's projected variances (computed here in fp64), the basis orthonormal.
TEST(KvtcPca, LongFitsKeepTheProjectedVariances) {
  const int64_t S = 1100, D = 24;  // four full blocks of 256 rows and a partial one
  const Tensor x = low_rank(1, S, D, 24, 13, 0.5, 2.0);
  const PcaModel m = fit_pca_model(x.data(), S, D, dp_settings(8 * D));
  ASSERT_EQ(m.kept(), D);
  Eigen::Map<const Eigen::Matrix<float, -1, -1, Eigen::RowMajor>> B(m.basis.data(), D, D);
  const Eigen::MatrixXd G = (B.cast<double>() * B.cast<double>().transpose());
  EXPECT_LT((G - Eigen::MatrixXd::Identity(D, D)).cwiseAbs().maxCoeff(), 1e-5);
  for (int64_t j = 0; j < D; ++j) {
    double var = 0;
    for (int64_t t = 0; t < S; ++t) {
      double p = 0;
      for (int64_t d = 0; d < D; ++d)
        p += (static_cast<double>(x.at(0, 0, t, d)) - m.mean[static_cast<size_t>(d)]) * B(j, d);
      var += p * p;
    }
    var /= S;
    EXPECT_NEAR(var, m.variances[static_cast<size_t>(j)], 1e-5 * m.variances[0]) << j;
  }
}

// The fp32 products of a long fit are taken on rows scaled by a power of two: values near the
// fp32 limits neither overflow nor vanish, and the variances scale with the square of the data.
TEST(KvtcPca, LongFitsSurviveExtremeMagnitudes) {
  const int64_t S = 600, D = 16;
  const Tensor x = low_rank(1, S, D, 16, 17, 0.5);
  const PcaModel base = fit_pca_model(x.data(), S, D, dp_settings(4 * D));
  for (float scale : {1e30f, 1e-30f}) {
    std::vector<float> y(x.data(), x.data() + S * D);
    for (auto& v : y) v *= scale;
    PcaModel m;
    ASSERT_NO_THROW(m = fit_pca_model(y.data(), S, D, dp_settings(4 * D))) << scale;
    const double s2 = static_cast<double>(scale) * static_cast<double>(scale);
    for (int64_t j = 0; j < D; ++j) {
      ASSERT_TRUE(std::isfinite(m.variances[static_cast<size_t>(j)])) << scale;
      EXPECT_NEAR(m.variances[static_cast<size_t>(j)] / s2, base.variances[static_cast<size_t>(j)],
                  1e-4 * base.variances[0])
          << "scale " << scale << " component " << j;
    }
    EXPECT_EQ(m.kept_bits, base.kept_bits) << scale;
  }
}

TEST(KvtcPca, ComponentCountIsMinOfTokensAndHeadDim) {
  const Tensor x = low_rank(1, 5, 16, 3, 2);
  const PcaModel m = fit_pca_model(x.data(), 5, 16, dp_settings(64));
  EXPECT_EQ(m.variances.size(), 5u);
  EXPECT_EQ(m.bits.size(), 5u);
  // 5 centered tokens span at most 4 directions: the last component has ~0 variance, 0 bits.
  EXPECT_LT(m.variances[4], 1e-6 * m.variances[0]);
  EXPECT_EQ(m.bits[4], 0);
}

TEST(KvtcPca, NearIdenticalReconstructionAtAGenerousBudget) {
  const int64_t S = 256, D = 32;
  const Tensor x = low_rank(2, S, D, 32, 6, 0.5, 3.0);
  auto codec = make_codec("kvtc:bit_budget=256", D);  // 8 bits x 32 components
  const EncodedBlock blk = codec->encode(x);
  const Tensor y = codec->decode(blk);
  EXPECT_LT(rel_mse(x, y), 1e-4);
  const auto rec = vq::bench::measure_reconstruction(x, x, FetchResult{y, y, {}, S});
  EXPECT_GT(rec.cosine, 0.9999);
}

TEST(KvtcPca, DroppedComponentsAreNotStored) {
  const int64_t S = 200, D = 16;
  const Tensor x = low_rank(1, S, D, 3, 8, 1e-3);
  EncodedSection sec;
  PcaRowCoder coder(D, dp_settings(24));
  coder.fit(x.data(), S, sec);
  const int64_t k = coder.model().kept();
  EXPECT_LT(k, D);
  // Header: format, varint D, varint k, k widths, mean[D] and k directions as fp32.
  EXPECT_EQ(sec.breakdown.basis, 4 * D + 4 * k * D);
  EXPECT_EQ(sec.breakdown.params, 1 + 1 + 1 + k);
  EXPECT_EQ(static_cast<int64_t>(sec.bytes.size()), sec.breakdown.total());
  const size_t header = sec.bytes.size();
  coder.encode_chunk(x.data(), S, sec);
  // Chunk params: varint(200) = 2 bytes, then (min, scale) per surviving component only.
  EXPECT_EQ(sec.breakdown.params, 3 + k + 2 + 8 * k);
  EXPECT_EQ(static_cast<int64_t>(sec.bytes.size()), sec.breakdown.total());
  EXPECT_GT(sec.bytes.size(), header);
}

TEST(KvtcPca, DpBeatsTheFixedSplitOnSkewedGeometryAtMatchedBudget) {
  int wins = 0;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    const Tensor K = vq::bench::make_kvtc_geometry("skewed_variance", 128, 32, 100 + 2 * seed);
    const Tensor V = vq::bench::make_kvtc_geometry("skewed_variance", 128, 32, 101 + 2 * seed);
    auto kv = make_cache("kvtc:bit_budget=64", 32);
    auto sp = make_cache("svdq_split:bit_budget=64", 32);
    const double mk = vq::bench::measure_reconstruction(K, V, kv->update_and_fetch(K, V)).mse;
    const double ms = vq::bench::measure_reconstruction(K, V, sp->update_and_fetch(K, V)).mse;
    wins += mk < ms;
  }
  EXPECT_GE(wins, 10) << "DP must win in at least 80% of 12 seeds";
}

TEST(KvtcCache, KeepsTokensRawUntilFitTokensHaveArrived) {
  const int64_t D = 16;
  auto cache = make_cache("kvtc:fit_tokens=24,chunk_tokens=8", D);
  const Tensor K = low_rank(1, 60, D, 4, 1), V = low_rank(1, 60, D, 4, 2);
  auto r = cache->update_and_fetch(K.slice_tokens(0, 1), V.slice_tokens(0, 1));
  EXPECT_FALSE(pca_codec(*cache, 0, 0, 0).fitted());
  EXPECT_EQ(cache->stats().get("raw_tokens"), 1);
  for (int64_t d = 0; d < D; ++d) EXPECT_EQ(r.keys.at(0, 0, 0, d), K.at(0, 0, 0, d));  // fp16 input
  EXPECT_GE(cache->stats().content_bytes, 2.0 * D * 2);
  for (int64_t s = 1; s < 23; ++s) cache->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
  EXPECT_FALSE(pca_codec(*cache, 0, 0, 0).fitted());
  cache->update(K.slice_tokens(23, 1), V.slice_tokens(23, 1));
  ASSERT_TRUE(pca_codec(*cache, 0, 0, 0).fitted());
  ASSERT_TRUE(pca_codec(*cache, 0, 0, 1).fitted());
  // The 24 fitted tokens are encoded at once (3 chunks of 8); nothing waits.
  EXPECT_EQ(cache->stats().get("raw_tokens"), 0);
  EXPECT_EQ(cache->stats().get("chunks"), 3);  // keys and values share the chunk rows
  // Then tokens wait until a chunk of 8 fills.
  for (int64_t s = 24; s < 31; ++s) cache->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
  EXPECT_EQ(cache->stats().get("raw_tokens"), 7);
  cache->update(K.slice_tokens(31, 1), V.slice_tokens(31, 1));
  EXPECT_EQ(cache->stats().get("raw_tokens"), 0);
  EXPECT_EQ(cache->stats().get("encoded_tokens"), 32);
}

TEST(KvtcCache, ModelIsFrozenAndHistoryNeverReencoded) {
  const int64_t D = 16;
  auto cache = make_cache("kvtc:fit_tokens=32,chunk_tokens=16,bit_budget=40", D);
  const Tensor K = low_rank(2, 200, D, 5, 3), V = low_rank(2, 200, D, 5, 4);
  cache->update(K.slice_tokens(0, 40), V.slice_tokens(0, 40));
  const std::vector<int> before = widths(*cache, 0, 1, 1);
  const FetchResult first = cache->fetch();
  // Later tokens from a different distribution (scaled and shifted) do not move the model, and
  // the rows already encoded decode exactly as before.
  Tensor K2 = low_rank(2, 160, D, 5, 9, 0.5, 2.0), V2 = low_rank(2, 160, D, 5, 10, 0.5, -2.0);
  for (int64_t s = 0; s < 160; ++s) cache->update(K2.slice_tokens(s, 1), V2.slice_tokens(s, 1));
  EXPECT_EQ(widths(*cache, 0, 1, 1), before);
  const FetchResult later = cache->fetch();
  const int64_t encoded_first = 40;  // fitted on all 40 rows, encoded at once: 14 + 13 + 13
  for (int64_t t = 0; t < encoded_first; ++t)
    for (int64_t d = 0; d < D; ++d) {
      ASSERT_EQ(later.keys.at(0, 1, t, d), first.keys.at(0, 1, t, d)) << t;
      ASSERT_EQ(later.values.at(0, 1, t, d), first.values.at(0, 1, t, d)) << t;
    }
}

TEST(KvtcCache, EncodedRowsAndRawWindow) {
  const int64_t D = 16, S = 100;
  auto cache = make_cache("kvtc:fit_tokens=20,chunk_tokens=10,bit_budget=48", D);
  const Tensor K = low_rank(1, S, D, 6, 5), V = low_rank(1, S, D, 6, 6);
  cache->update(K.slice_tokens(0, 25), V.slice_tokens(0, 25));
  for (int64_t s = 25; s < S; ++s) cache->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
  const int64_t encoded = static_cast<int64_t>(cache->stats().get("encoded_tokens"));
  EXPECT_EQ(encoded, 95);
  EXPECT_EQ(cache->stats().get("raw_tokens"), 5);
  const FetchResult got = cache->fetch();
  EXPECT_LT(rel_mse(K.slice_tokens(0, encoded), got.keys.slice_tokens(0, encoded)), 0.05);
  for (int64_t t = encoded; t < S; ++t)  // raw window: fp16 values (the input is fp16 already)
    for (int64_t d = 0; d < D; ++d) ASSERT_EQ(got.keys.at(0, 0, t, d), K.at(0, 0, t, d));
  // Each encoded row costs the packed codes of its kept components.
  const auto& c = pca_codec(*cache, 0, 0, 0);
  int64_t bits = 0;
  for (uint8_t w : c.widths()) bits += w;
  EXPECT_EQ(c.row_bytes(), (bits + 7) / 8);
  EXPECT_LE(bits, 48);
}

TEST(KvtcCache, ByteAccountingAddsUp) {
  const int64_t D = 32, S = 300;
  auto cache = make_cache("kvtc:chunk_tokens=64", D);
  const Tensor K = low_rank(2, S, D, 6, 7), V = low_rank(2, S, D, 6, 8);
  cache->update(K.slice_tokens(0, 100), V.slice_tokens(0, 100));
  for (int64_t s = 100; s < S; ++s) cache->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
  const CacheStats st = cache->stats();
  EXPECT_DOUBLE_EQ(st.kept_bytes, st.content_bytes + st.codec_param_bytes + st.policy_bytes +
                                      st.index_bytes + st.overhead_bytes);
  EXPECT_DOUBLE_EQ(st.get("resident_kv_bytes"), st.content_bytes + st.codec_param_bytes);
  EXPECT_DOUBLE_EQ(st.full_seq_bytes, 2.0 * S * D * 2 * 2);
  EXPECT_DOUBLE_EQ(st.compression_ratio, st.full_seq_bytes / st.kept_bytes);
  // The storage form (entropy coded) is smaller than the resident fixed-width codes.
  EXPECT_GT(st.stored_bytes, 0);
  EXPECT_GT(st.get("entropy_coding_gain"), 1.0);
  // The resident codes: every encoded row at its packed width, plus the fp16 window.
  const auto& c = pca_codec(*cache, 0, 0, 0);
  const double rows = st.get("encoded_tokens"), raw = st.get("raw_tokens");
  EXPECT_GE(st.content_bytes,
            2 * 2 * (rows * static_cast<double>(c.row_bytes()) + raw * D * 2) - 1e-9);
}

TEST(KvtcCache, CompressionRatioAboveOneForKeysAndValuesOnALongLowRankSequence) {
  const int64_t D = 64, S = 4096;
  auto cache = make_cache("kvtc", D);  // default budget: 4 bits x 64 components
  const Tensor K = low_rank(1, S, D, 8, 11, 0.01, 1.0), V = low_rank(1, S, D, 8, 12);
  cache->update(K.slice_tokens(0, 512), V.slice_tokens(0, 512));
  for (int64_t s = 512; s < S; s += 32) cache->update(K.slice_tokens(s, 32), V.slice_tokens(s, 32));
  const CacheStats st = cache->stats();
  EXPECT_GT(st.compression_ratio, 1.0);
  std::printf("long low-rank sequence: resident compression ratio %.2f, entropy gain %.3f\n",
              st.compression_ratio, st.get("entropy_coding_gain"));
  const FetchResult got = cache->fetch();
  EXPECT_LT(rel_mse(K, got.keys), 1e-3);
}

TEST(KvtcCache, BaselineAllocationsFollowTheirRules) {
  const int64_t D = 32;
  const Tensor K = vq::bench::make_kvtc_geometry("flat", 128, D, 1);
  auto u = make_cache("uniform:bit_budget=70", D);
  u->update(K, K);
  const auto ub = widths(*u, 0, 0, 0);
  ASSERT_EQ(ub.size(), 32u);
  for (size_t i = 0; i < ub.size(); ++i) EXPECT_EQ(ub[i], i < 6 ? 3 : 2);
  auto s = make_cache("svdq_split:bit_budget=64", D);
  s->update(K, K);
  const auto sb = widths(*s, 0, 0, 0);
  ASSERT_EQ(sb.size(), 32u);
  for (size_t i = 0; i < sb.size(); ++i) EXPECT_EQ(sb[i], i < 8 ? 2 : 1);
  auto w = make_cache("kvtc:bit_budget=64,alloc=waterfill", D);
  w->update(K, K);
  int64_t used = 0;
  for (int b : widths(*w, 0, 0, 0)) used += b;
  EXPECT_LE(used, 64);
}

TEST(KvtcCache, OptionsAreValidated) {
  EXPECT_THROW(CacheConfig::parse("kvtc:bit_choices=1,2,4"), InvalidArgument);
  EXPECT_THROW(CacheConfig::parse("kvtc:bit_choices=0,9"), InvalidArgument);
  EXPECT_THROW(CacheConfig::parse("kvtc:beta=1"), InvalidArgument);
  EXPECT_THROW(CacheConfig::parse("kvtc:alloc=greedy"), InvalidArgument);
  EXPECT_THROW(CacheConfig::parse("kvtc:chunk_tokens=0"), InvalidArgument);
  const CacheConfig c =
      CacheConfig::parse("kvtc:bit_budget=64,bit_choices=0,2,4,beta=3,alloc=waterfill");
  EXPECT_EQ(CacheConfig::parse(c.to_string()), c);
}

}  // namespace
}  // namespace vq::transform

namespace vq::transform {
namespace {

TEST(KvtcCache, RawWindowHoldsExactlyTheFp16Values) {
  const int64_t D = 24;
  auto cache = make_cache("kvtc:fit_tokens=64", D);
  Rng rng(31);
  Tensor K(1, 2, 9, D), V(1, 2, 9, D);
  for (int64_t i = 0; i < K.numel(); ++i) {
    // normal, tiny (fp16 subnormal), large (up to fp16's largest, 65504: the cache refuses
    // more) and rounding-tie-prone values
    const double m = i % 4 == 0 ? 1e-6 : (i % 4 == 1 ? 3e4 : 1.0);
    K.data()[i] = static_cast<float>(std::clamp(rng.normal() * m, -65504.0, 65504.0));
    V.data()[i] = static_cast<float>(std::clamp(rng.normal() * m, -65504.0, 65504.0));
  }
  const FetchResult r = cache->update_and_fetch(K, V);
  for (int64_t i = 0; i < K.numel(); ++i) {
    ASSERT_EQ(r.keys.data()[i], round_to_fp16(K.data()[i])) << i;
    ASSERT_EQ(r.values.data()[i], round_to_fp16(V.data()[i])) << i;
  }
  // Only the fp16 window is held: its rows are the content bytes.
  EXPECT_GE(cache->stats().content_bytes, 2.0 * 2 * 9 * D * 2);
  EXPECT_LT(cache->stats().content_bytes, 2.0 * 2 * 9 * D * 2 * 2);
  EXPECT_EQ(cache->stats().get("encoded_tokens"), 0);
}

}  // namespace
}  // namespace vq::transform

// KVTC on one [S, D] block (the PCA coder) and the kvtc cache: PCA correctness, exact inverse at
// a generous budget, 0-bit components not stored, DP beats the fixed split on the skewed geometry,
// basis and allocation frozen after the first fit, raw window and chunking, byte accounting, and
// compression ratio > 1 for K and V on a long low-rank sequence.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>

#include "core/rng.hpp"
#include "eval/bench_kvtc.hpp"
#include "transform/pca_coder.hpp"
#include "transform/transform_cache.hpp"
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
        for (int64_t i = 0; i < rank; ++i) s += z[static_cast<size_t>(i)] * M[static_cast<size_t>(i * D + d)];
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

const PcaRowCoder& pca_encoder(const KVCache& c, int64_t b, int64_t h, int kv) {
  const auto& tc = dynamic_cast<const TransformCache&>(c);
  return dynamic_cast<const PcaRowCoder&>(*tc.encoder(b, h, kv));
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
  const auto& tc = dynamic_cast<const TransformCache&>(*cache);
  EXPECT_FALSE(tc.fitted(0, 0, 0));
  EXPECT_EQ(tc.raw_tokens(0, 0, 0), 1);
  for (int64_t d = 0; d < D; ++d) EXPECT_EQ(r.keys.at(0, 0, 0, d), K.at(0, 0, 0, d));  // fp16 input
  EXPECT_DOUBLE_EQ(cache->stats().kept_bytes, 2.0 * D * 2);
  for (int64_t s = 1; s < 23; ++s) cache->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
  EXPECT_FALSE(tc.fitted(0, 0, 0));
  cache->update(K.slice_tokens(23, 1), V.slice_tokens(23, 1));
  ASSERT_TRUE(tc.fitted(0, 0, 0));
  ASSERT_TRUE(tc.fitted(0, 0, 1));
  // The 24 fitted tokens are encoded at once (3 chunks of 8); nothing waits.
  EXPECT_EQ(tc.raw_tokens(0, 0, 0), 0);
  EXPECT_EQ(pca_encoder(*cache, 0, 0, 0).model().variances.size(), static_cast<size_t>(D));
  // Then tokens wait until a chunk of 8 fills.
  for (int64_t s = 24; s < 31; ++s) cache->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
  EXPECT_EQ(tc.raw_tokens(0, 0, 0), 7);
  EXPECT_DOUBLE_EQ(cache->stats().get("raw_bytes"), 2.0 * 7 * D * 2);
  cache->update(K.slice_tokens(31, 1), V.slice_tokens(31, 1));
  EXPECT_EQ(tc.raw_tokens(0, 0, 0), 0);
  EXPECT_EQ(cache->stats().get("encoded_tokens"), 32);
}

TEST(KvtcCache, BasisAndAllocationAreFrozenAfterTheFirstFit) {
  const int64_t D = 16;
  auto cache = make_cache("kvtc:fit_tokens=32,chunk_tokens=16,bit_budget=40", D);
  const Tensor K = low_rank(2, 200, D, 5, 3), V = low_rank(2, 200, D, 5, 4);
  cache->update(K.slice_tokens(0, 40), V.slice_tokens(0, 40));
  const PcaModel before = pca_encoder(*cache, 0, 1, 1).model();
  const auto& tc = dynamic_cast<const TransformCache&>(*cache);
  const std::vector<uint8_t> bytes_before = tc.section(0, 1, 1).bytes;
  // Later tokens from a different distribution (scaled and shifted) do not move the model.
  Tensor K2 = low_rank(2, 160, D, 5, 9, 0.5, 2.0), V2 = low_rank(2, 160, D, 5, 10, 0.5, -2.0);
  for (int64_t s = 0; s < 160; ++s) cache->update(K2.slice_tokens(s, 1), V2.slice_tokens(s, 1));
  const PcaModel after = pca_encoder(*cache, 0, 1, 1).model();
  EXPECT_EQ(after.basis, before.basis);
  EXPECT_EQ(after.mean, before.mean);
  EXPECT_EQ(after.bits, before.bits);
  EXPECT_EQ(after.variances, before.variances);
  // History is never re-encoded: the stored bytes only grow at the end.
  const std::vector<uint8_t>& bytes_after = tc.section(0, 1, 1).bytes;
  ASSERT_GT(bytes_after.size(), bytes_before.size());
  EXPECT_TRUE(std::equal(bytes_before.begin(), bytes_before.end(), bytes_after.begin()));
}

TEST(KvtcCache, ViewIsTheDecodeOfTheStoredBytes) {
  const int64_t D = 16, S = 100;
  auto cache = make_cache("kvtc:fit_tokens=20,chunk_tokens=10,bit_budget=48", D);
  const Tensor K = low_rank(1, S, D, 6, 5), V = low_rank(1, S, D, 6, 6);
  cache->update(K.slice_tokens(0, 25), V.slice_tokens(0, 25));
  for (int64_t s = 25; s < S; ++s) cache->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
  const auto& tc = dynamic_cast<const TransformCache&>(*cache);
  const int64_t encoded = static_cast<int64_t>(cache->stats().get("encoded_tokens"));
  EXPECT_EQ(encoded, 95);
  EXPECT_EQ(tc.raw_tokens(0, 0, 0), 5);
  // The stored stream is a valid codec section for the encoded tokens.
  auto codec = make_codec(cache->config(), D);
  EncodedBlock blk;
  blk.H = 1;
  blk.S = encoded;
  blk.D = D;
  blk.sections.push_back(tc.section(0, 0, 0));
  const Tensor dec = codec->decode(blk);
  const FetchResult got = cache->fetch();
  for (int64_t t = 0; t < encoded; ++t)
    for (int64_t d = 0; d < D; ++d) ASSERT_EQ(got.keys.at(0, 0, t, d), dec.at(0, 0, t, d));
  for (int64_t t = encoded; t < S; ++t)  // raw window: fp16 values (the input is fp16 already)
    for (int64_t d = 0; d < D; ++d) ASSERT_EQ(got.keys.at(0, 0, t, d), K.at(0, 0, t, d));
}

TEST(KvtcCache, ByteAccountingAddsUp) {
  const int64_t D = 32, S = 300;
  auto cache = make_cache("kvtc:chunk_tokens=64", D);
  const Tensor K = low_rank(2, S, D, 6, 7), V = low_rank(2, S, D, 6, 8);
  cache->update(K.slice_tokens(0, 100), V.slice_tokens(0, 100));
  for (int64_t s = 100; s < S; ++s) cache->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
  const CacheStats st = cache->stats();
  const auto& tc = dynamic_cast<const TransformCache&>(*cache);
  double sections[2] = {0, 0};
  int64_t raw = 0;
  for (int64_t h = 0; h < 2; ++h)
    for (int kv = 0; kv < 2; ++kv) {
      sections[kv] += static_cast<double>(tc.section(0, h, kv).bytes.size());
      raw += tc.raw_tokens(0, h, kv) * D * 2;
    }
  EXPECT_DOUBLE_EQ(st.kept_bytes, sections[0] + sections[1] + static_cast<double>(raw));
  EXPECT_DOUBLE_EQ(st.get("kvtc_bytes"), st.kept_bytes);
  EXPECT_DOUBLE_EQ(st.get("kvtc_bytes_k") + st.get("kvtc_bytes_v"), st.kept_bytes);
  EXPECT_DOUBLE_EQ(st.get("basis_bytes") + st.get("params_bytes") + st.get("payload_bytes") +
                       st.get("table_bytes") + st.get("raw_bytes"),
                   st.kept_bytes);
  EXPECT_DOUBLE_EQ(st.get("full_seq_bytes"), 2.0 * S * D * 2 * 2);
  EXPECT_DOUBLE_EQ(st.get("full_seq_bytes_k"), 2.0 * S * D * 2);
  EXPECT_DOUBLE_EQ(st.compression_ratio, st.full_seq_bytes / st.kept_bytes);
  EXPECT_DOUBLE_EQ(st.get("compression_ratio_k"), st.get("full_seq_bytes_k") / st.get("kvtc_bytes_k"));
  // The gain compares fixed-width codes with the realized payload + tables.
  const double fixed = st.get("pre_entropy_bytes") - (st.kept_bytes - st.get("payload_bytes") - st.get("table_bytes"));
  EXPECT_NEAR(st.get("entropy_coding_gain"), fixed / (st.get("payload_bytes") + st.get("table_bytes")), 1e-12);
  EXPECT_GT(st.get("entropy_coding_gain"), 0.5);
}

TEST(KvtcCache, CompressionRatioAboveOneForKeysAndValuesOnALongLowRankSequence) {
  const int64_t D = 64, S = 4096;
  auto cache = make_cache("kvtc", D);  // default budget: 4 bits x 64 components
  const Tensor K = low_rank(1, S, D, 8, 11, 0.01, 1.0), V = low_rank(1, S, D, 8, 12);
  cache->update(K.slice_tokens(0, 512), V.slice_tokens(0, 512));
  for (int64_t s = 512; s < S; s += 32) cache->update(K.slice_tokens(s, 32), V.slice_tokens(s, 32));
  const CacheStats st = cache->stats();
  EXPECT_GT(st.get("compression_ratio_k"), 1.0);
  EXPECT_GT(st.get("compression_ratio_v"), 1.0);
  std::printf("long low-rank sequence: compression ratio K %.2f, V %.2f, entropy gain %.3f\n",
              st.get("compression_ratio_k"), st.get("compression_ratio_v"),
              st.get("entropy_coding_gain"));
  const FetchResult got = cache->fetch();
  EXPECT_LT(rel_mse(K, got.keys), 1e-3);
}

TEST(KvtcCache, BaselineAllocationsFollowTheirRules) {
  const int64_t D = 32;
  const Tensor K = vq::bench::make_kvtc_geometry("flat", 128, D, 1);
  auto u = make_cache("uniform:bit_budget=70", D);
  u->update(K, K);
  const auto ub = pca_encoder(*u, 0, 0, 0).model().bits;
  for (size_t i = 0; i < ub.size(); ++i) EXPECT_EQ(ub[i], i < 6 ? 3 : 2);
  auto s = make_cache("svdq_split:bit_budget=64", D);
  s->update(K, K);
  const auto sb = pca_encoder(*s, 0, 0, 0).model().bits;
  for (size_t i = 0; i < sb.size(); ++i) EXPECT_EQ(sb[i], i < 8 ? 2 : 1);
  auto w = make_cache("kvtc:bit_budget=64,alloc=waterfill", D);
  w->update(K, K);
  int64_t used = 0;
  for (int b : pca_encoder(*w, 0, 0, 0).model().bits) used += b;
  EXPECT_LE(used, 64);
}

TEST(KvtcCache, OptionsAreValidated) {
  EXPECT_THROW(CacheConfig::parse("kvtc:bit_choices=1,2,4"), InvalidArgument);
  EXPECT_THROW(CacheConfig::parse("kvtc:bit_choices=0,9"), InvalidArgument);
  EXPECT_THROW(CacheConfig::parse("kvtc:beta=1"), InvalidArgument);
  EXPECT_THROW(CacheConfig::parse("kvtc:alloc=greedy"), InvalidArgument);
  EXPECT_THROW(CacheConfig::parse("kvtc:chunk_tokens=0"), InvalidArgument);
  const CacheConfig c = CacheConfig::parse("kvtc:bit_budget=64,bit_choices=0,2,4,beta=3,alloc=waterfill");
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
    // normal, tiny (fp16 subnormal), large and rounding-tie-prone values
    const double m = i % 4 == 0 ? 1e-6 : (i % 4 == 1 ? 3e4 : 1.0);
    K.data()[i] = static_cast<float>(rng.normal() * m);
    V.data()[i] = static_cast<float>(rng.normal() * m);
  }
  const FetchResult r = cache->update_and_fetch(K, V);
  for (int64_t i = 0; i < K.numel(); ++i) {
    ASSERT_EQ(r.keys.data()[i], round_to_fp16(K.data()[i])) << i;
    ASSERT_EQ(r.values.data()[i], round_to_fp16(V.data()[i])) << i;
  }
  EXPECT_DOUBLE_EQ(cache->stats().kept_bytes, 2.0 * 2 * 9 * D * 2);
  EXPECT_DOUBLE_EQ(cache->stats().compression_ratio, 1.0);
}

}  // namespace
}  // namespace vq::transform

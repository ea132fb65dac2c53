// One-shot scoring (kvpress's protocol): the shared keeper's rounding and tie rule, AdaKV's
// head-adaptive budgets, and each method's score on a small example worked out by hand from
// the formula (docs/methods.md), then the cache and the prefill protocol built on them.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "eval/fidelity.hpp"
#include "eviction/family_util.hpp"
#include "eviction/keyformer.hpp"
#include "eviction/one_shot.hpp"
#include "model/model_test_util.hpp"
#include "test_util.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"

namespace {

using vq::eviction::keep_top;
using vq::eviction::keep_top_adaptive;
using vq::eviction::one_shot_keep;
using Kept = std::vector<std::vector<int64_t>>;

// Scores [H, S] of a method's one-shot rule on K, V [H, S, D] (and Q [Hq, S, D] when given).
std::vector<double> scores_of(const std::string& spec, int64_t H, int64_t S, int64_t D,
                              const std::vector<float>& K, const std::vector<float>& V,
                              const std::vector<float>* Q = nullptr, int64_t Hq = 0,
                              uint64_t seed = 0) {
  const vq::CacheConfig c = vq::CacheConfig::parse(spec);
  const auto scorer = vq::find_method(c.method()).make_scorer(c);
  vq::OneShotInput in;
  in.H = H;
  in.S = S;
  in.D = D;
  in.K = K.data();
  in.V = V.data();
  in.seed = seed;
  if (Q) {
    in.Q = Q->data();
    in.Hq = Hq;
  }
  std::vector<double> out(static_cast<size_t>(H * S));
  scorer->score(in, out.data());
  return out;
}

const float kLn2 = std::log(2.0f), kLn3 = std::log(3.0f), kLn4 = std::log(4.0f);
const float kR2 = std::sqrt(2.0f);  // q = (sqrt 2, 0) makes q . k / sqrt(2) = k_0

TEST(OneShotKeep, KvpressRounding) {
  EXPECT_EQ(one_shot_keep(100, 0.875), 12);  // int(12.5)
  EXPECT_EQ(one_shot_keep(100, 0.25), 75);
  EXPECT_EQ(one_shot_keep(100, 0.0), 100);
  EXPECT_EQ(one_shot_keep(384, 0.875), 48);
  EXPECT_EQ(one_shot_keep(3, 0.875), 1);  // at least one token
  EXPECT_EQ(one_shot_keep(0, 0.5), 0);
}

TEST(OneShotKeep, RefusesRatiosOutsideTheRange) {
  for (double r : {1.0, -0.1, 1.5}) {
    try {
      one_shot_keep(10, r);
      FAIL() << "ratio " << r << " accepted";
    } catch (const vq::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("[0, 1)"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(one_shot_keep(10, std::nan("")), vq::InvalidArgument);
}

TEST(OneShotKeep, TopKPerHeadTiesToTheLaterToken) {
  const std::vector<double> s = {0.5, 0.9, 0.5, 0.1,  // head 0
                                 1.0, 1.0, 1.0, 1.0};
  EXPECT_EQ(keep_top(s.data(), 2, 4, 2), (Kept{{1, 2}, {2, 3}}));
  EXPECT_EQ(keep_top(s.data(), 2, 4, 4), (Kept{{0, 1, 2, 3}, {0, 1, 2, 3}}));
}

TEST(OneShotKeep, AdaKVSpreadsTheLayerBudgetOverHeads) {
  // n_keep 2 per head, alpha 0.5: each head secures its best token, then the layer's 4 slots go
  // to the highest remaining scores, all in head 0.
  const std::vector<double> s = {0.9,  0.8,  0.7,  0.1,  // head 0: concentrated mass
                                 0.05, 0.01, 0.02, 0.03};
  EXPECT_EQ(keep_top_adaptive(s.data(), 2, 4, 2, 0.5), (Kept{{0, 1, 2}, {0}}));
  // alpha 1: every head keeps its own n_keep (the uniform rule).
  EXPECT_EQ(keep_top_adaptive(s.data(), 2, 4, 2, 1.0), keep_top(s.data(), 2, 4, 2));
  // alpha 0: one ranking over the layer.
  EXPECT_EQ(keep_top_adaptive(s.data(), 2, 4, 2, 0.0), (Kept{{0, 1, 2, 3}, {}}));
  EXPECT_THROW(keep_top_adaptive(s.data(), 2, 4, 2, 1.5), vq::InvalidArgument);
}

TEST(OneShotScore, StreamingLLMKeepsSinksAndTheMostRecent) {
  const int64_t S = 10, D = 2;
  const std::vector<float> K(S * D, 1.0f), V(S * D, 1.0f);
  const auto s = scores_of("streaming_llm:n_sink=4", 1, S, D, K, V);
  // kvpress: n_pruned = 10 - int(10 * 0.5) = 5 zeros after the 4 sinks -> keeps 0..3 and 9.
  EXPECT_EQ(keep_top(s.data(), 1, S, one_shot_keep(S, 0.5)), (Kept{{0, 1, 2, 3, 9}}));
}

TEST(OneShotScore, KNormIsMinusTheKeyNorm) {
  const std::vector<float> K = {3, 4, 1, 0, 0, 2, 6, 8}, V(8, 1.0f);
  const auto s = scores_of("knorm", 1, 4, 2, K, V);
  EXPECT_EQ(s, (std::vector<double>{-5, -1, -2, -10}));
  EXPECT_EQ(keep_top(s.data(), 1, 4, 2), (Kept{{1, 2}}));
}

TEST(OneShotScore, TovaAveragesTheLastQueryOverAllHeads) {
  // Two KV heads, one query head each; the last query is (sqrt 2, 0) in both.
  // head 0 logits over keys 0..2: (0, ln 3, 0) -> (1/5, 3/5, 1/5)
  // head 1 logits: (ln 4, 0, 0) -> (4/6, 1/6, 1/6)
  // mean over heads: token 0 = (1/5 + 4/6) / 2, token 1 = (3/5 + 1/6) / 2; the last token gets
  // the largest of those; every head gets the same scores.
  const std::vector<float> K = {0,    0, kLn3, 0, 0, 0,  // head 0
                                kLn4, 0, 0,    0, 0, 0};
  const std::vector<float> V(12, 1.0f);
  const std::vector<float> Q = {0, 0, 0, 0, kR2, 0,  // query head 0
                                0, 0, 0, 0, kR2, 0};
  const auto s = scores_of("tova", 2, 3, 2, K, V, &Q, 2);
  const double t0 = (1.0 / 5 + 4.0 / 6) / 2, t1 = (3.0 / 5 + 1.0 / 6) / 2;
  const std::vector<double> want = {t0, t1, t0, t0, t1, t0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(s[i], want[i], 1e-6) << i;
  // Head 0 alone would keep token 1; the layer mean keeps token 0 in both heads.
  EXPECT_EQ(keep_top(s.data(), 2, 3, 2), (Kept{{0, 2}, {0, 2}}));
}

TEST(OneShotScore, ObservedAttentionDividesByTheQueriesThatSawTheToken) {
  // q0 = 0 sees only k0: (1); q1 = (sqrt 2, 0) over k0 = 0, k1 = (ln 3, 0): (1/4, 3/4);
  // q2 over k0, k1, k2 = (ln 2, 0): (1/6, 3/6, 2/6).
  // Sums: 17/12, 5/4, 1/3; divided by S - j = 3, 2, 1: 17/36, 5/8, 1/3.
  const std::vector<float> K = {0, 0, kLn3, 0, kLn2, 0}, V(6, 1.0f);
  const std::vector<float> Q = {0, 0, kR2, 0, kR2, 0};
  const auto s = scores_of("h2o", 1, 3, 2, K, V, &Q, 1);
  EXPECT_NEAR(s[0], 17.0 / 36, 1e-6);
  EXPECT_NEAR(s[1], 5.0 / 8, 1e-6);
  EXPECT_NEAR(s[2], 1.0 / 3, 1e-6);
  // Unnormalised sums would keep token 0 (17/12 > 5/4); kvpress's rule keeps token 1.
  EXPECT_EQ(keep_top(s.data(), 1, 3, 1), (Kept{{1}}));
}

TEST(OneShotScore, SnapKVPoolsTheWindowVoteAndAveragesTheGroup) {
  // S = 5, window 2 (probes at 3 and 4), kernel 3 (avg, zero padding, divided by 3), G = 2.
  // Keys: k1 = (ln 3, 0), the others 0. Query head 0 probes = (sqrt 2, 0):
  //   t = 3: (1, 3, 1, 1) / 6; t = 4: (1, 3, 1, 1, 1) / 7; mean over tokens 0..2:
  //   (13, 39, 13) / 84; pooled: (52, 65, 52) / 252.
  // Query head 1 probes = 0 (uniform): mean (1/4 + 1/5) / 2 = 9/40 each; pooled (6, 9, 6) / 40.
  // Group mean per token; the window tokens 3, 4 get the largest.
  const int64_t S = 5, D = 2;
  std::vector<float> K(S * D, 0.0f), V(S * D, 1.0f), Q(2 * S * D, 0.0f);
  K[2] = kLn3;
  for (int64_t t = 3; t < S; ++t) Q[static_cast<size_t>(t * D)] = kR2;  // head 0 only
  const auto s = scores_of("snapkv:window=2,kernel=3,pool=avg", 1, S, D, K, V, &Q, 2);
  const double a = (52.0 / 252 + 6.0 / 40) / 2, b = (65.0 / 252 + 9.0 / 40) / 2;
  const std::vector<double> want = {a, b, a, b, b};
  for (int64_t i = 0; i < S; ++i) EXPECT_NEAR(s[static_cast<size_t>(i)], want[i], 1e-6) << i;
  // A context no longer than the window is refused, naming both.
  try {
    scores_of("snapkv:window=5", 1, S, D, K, V, &Q, 2);
    FAIL();
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("S = 5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("window = 5"), std::string::npos) << e.what();
  }
}

TEST(OneShotScore, QFiltersProjectsKeysOnTheQueriesTopDirection) {
  // Queries along +x: the filter is (1, 0); scores are the keys' x components.
  const std::vector<float> K = {0.5f, 3, 2, 0, -1, 5}, V(6, 1.0f);
  const std::vector<float> Q = {2, 0, 1, 0, 3, 0};
  const auto s = scores_of("qfilters", 1, 3, 2, K, V, &Q, 1);
  EXPECT_NEAR(s[0], 0.5, 1e-9);
  EXPECT_NEAR(s[1], 2.0, 1e-9);
  EXPECT_NEAR(s[2], -1.0, 1e-9);
  // Queries along -x flip the filter: the key at -1 is now favoured.
  const std::vector<float> Qn = {-2, 0, -1, 0, -3, 0};
  const auto t = scores_of("qfilters", 1, 3, 2, K, V, &Qn, 1);
  EXPECT_EQ(keep_top(t.data(), 1, 3, 1), (Kept{{2}}));
}

TEST(OneShotScore, CurPaperLocalEnergiesAndLeverageTypes) {
  // window 2: key energies (1, 9 | 4, 4) -> (0.1, 0.9 | 0.5, 0.5);
  //           value energies (2, 2 | 9, 1) -> (0.5, 0.5 | 0.9, 0.1).
  const std::vector<float> K = {1, 0, 0, 3, 2, 0, 0, 2};
  const std::vector<float> V = {1, 1, 1, 1, 3, 0, 1, 0};
  auto near = [](const std::vector<double>& a, const std::vector<double>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-9) << i;
  };
  const std::string base = "curdkv_paper:window=2,n_sink=0,leverage=";
  near(scores_of(base + "kv_product", 1, 4, 2, K, V), {0.05, 0.45, 0.45, 0.05});
  near(scores_of(base + "key", 1, 4, 2, K, V), {0.05, 0.45, 0.25, 0.25});
  near(scores_of(base + "value", 1, 4, 2, K, V), {0.25, 0.25, 0.45, 0.05});
  near(scores_of(base + "kv_avg", 1, 4, 2, K, V), {0.15, 0.35, 0.35, 0.15});
  // Sinks score 1; a trailing partial window is normalised over its own tokens.
  near(scores_of("curdkv_paper:window=2,n_sink=1", 1, 4, 2, K, V), {1.0, 0.45, 0.45, 0.05});
  const std::vector<float> K3(K.begin(), K.begin() + 6), V3(V.begin(), V.begin() + 6);
  // (0.1 * 0.5, 0.9 * 0.5, 1 * 1) / 1.5
  near(scores_of(base + "kv_product", 1, 3, 2, K3, V3), {0.05 / 1.5, 0.45 / 1.5, 1.0 / 1.5});
}

TEST(OneShotScore, CurPaperProjectionIsSeededAndChangesTheEnergies) {
  const auto K = vqtest::random_tensor(1, 1, 32, 16, 3), V = vqtest::random_tensor(1, 1, 32, 16, 4);
  const std::vector<float> k(K.head(0, 0), K.head(0, 0) + 32 * 16),
      v(V.head(0, 0), V.head(0, 0) + 32 * 16);
  const auto a = scores_of("curdkv_paper:projection=gaussian,seed=1", 1, 32, 16, k, v);
  const auto b = scores_of("curdkv_paper:projection=gaussian,seed=1", 1, 32, 16, k, v);
  const auto c = scores_of("curdkv_paper:projection=gaussian,seed=2", 1, 32, 16, k, v);
  const auto d = scores_of("curdkv_paper", 1, 32, 16, k, v);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
}

TEST(OneShotScore, CurDKVSeedSumsLeverageOverTheLastProbes) {
  // S = 2 <= D, rank_cap >= S: leverage is ||w_i||^2 / ||W||_F^2 (closed form).
  // probe 0: W = (1 * v0) -> leverage 1 for token 0.
  // probe 1 = (sqrt 2, 0) over k0 = 0, k1 = (ln 3, 0): a = (1/4, 3/4);
  //   v0 = (1, 0), v1 = (0, 2): ||w||^2 = (1/16, 9/4) -> (1/37, 36/37).
  // token 0: 1 + 1/37; token 1: 36/37 (no sinks).
  const std::vector<float> K = {0, 0, kLn3, 0}, V = {1, 0, 0, 2};
  const std::vector<float> Q = {0, 0, kR2, 0};
  const auto s = scores_of("curdkv:n_sink=0", 1, 2, 2, K, V, &Q, 1);
  EXPECT_NEAR(s[0], 1.0 + 1.0 / 37, 1e-9);
  EXPECT_NEAR(s[1], 36.0 / 37, 1e-9);
  const auto t = scores_of("curdkv:n_sink=1", 1, 2, 2, K, V, &Q, 1);
  EXPECT_TRUE(std::isinf(t[0]));
}

TEST(OneShotScore, ExpectedAttentionRotatesTheQueryMeanToTheFuture) {
  // Pre-RoPE queries (1, 0) at positions 0 and 1 (post-RoPE: (1, 0) and (cos 1, sin 1)); mean
  // (1, 0), covariance 0. future = 1: the rotation to position 2, mu' = (cos 2, sin 2) = u.
  // k0 = sqrt(2) ln 3 u, k1 = 0: z = (ln 3, 0), a = (3/4, 1/4); ||v|| = (1, 2) -> (0.75, 0.5).
  const float c1 = std::cos(1.0f), s1 = std::sin(1.0f), c2 = std::cos(2.0f), s2 = std::sin(2.0f);
  const std::vector<float> K = {kR2 * kLn3 * c2, kR2 * kLn3 * s2, 0, 0}, V = {1, 0, 0, 2};
  const std::vector<float> Q = {1, 0, c1, s1};
  const auto s = scores_of("expected_attention:n_sink=0,future=1", 1, 2, 2, K, V, &Q, 1);
  EXPECT_NEAR(s[0], 0.75, 1e-6);
  EXPECT_NEAR(s[1], 0.5, 1e-6);
  // Queries (1, 0) and (-1, 0): mean 0, covariance diag(1, 0) -> C' = u u^T;
  // z_j = (k_j . u)^2 / (2 D): k0 = 2 sqrt(ln 3) u gives ln 3; without vnorm (3/4, 1/4).
  const float r = 2.0f * std::sqrt(kLn3);
  const std::vector<float> K2 = {r * c2, r * s2, 0, 0};
  const std::vector<float> Q2 = {1, 0, -c1, -s1};
  const auto t =
      scores_of("expected_attention:n_sink=0,future=1,vnorm=false", 1, 2, 2, K2, V, &Q2, 1);
  EXPECT_NEAR(t[0], 0.75, 1e-5);
  EXPECT_NEAR(t[1], 0.25, 1e-5);
  // Sinks take the layer's largest score.
  const auto u = scores_of("expected_attention:n_sink=1,future=1", 1, 2, 2, K, V, &Q, 1);
  EXPECT_EQ(u[0], u[1]);
}

TEST(OneShotScore, ExpectedAttentionAveragesTheRotationOverTheFuture) {
  // As above with future = 5: the query mean (1, 0) rotated by the rotation averaged over
  // positions 2..6, i.e. mu' = (mean cos p, mean sin p) (summed term by term here), so that
  // k0 = sqrt(2) ln 3 mu' / |mu'|^2 gives z = (ln 3, 0) again.
  double cbar = 0, sbar = 0;
  for (int p = 2; p <= 6; ++p) {
    cbar += std::cos(static_cast<double>(p)) / 5.0;
    sbar += std::sin(static_cast<double>(p)) / 5.0;
  }
  const double a = kR2 * kLn3 / (cbar * cbar + sbar * sbar);
  const float c1 = std::cos(1.0f), s1 = std::sin(1.0f);
  const std::vector<float> K = {static_cast<float>(a * cbar), static_cast<float>(a * sbar), 0, 0},
                           V = {1, 0, 0, 2};
  const std::vector<float> Q = {1, 0, c1, s1};
  const auto s = scores_of("expected_attention:n_sink=0,future=5", 1, 2, 2, K, V, &Q, 1);
  EXPECT_NEAR(s[0], 0.75, 1e-5);
  EXPECT_NEAR(s[1], 0.5, 1e-5);
}

TEST(OneShotScore, KeyformerSumsTheGumbelSoftmaxOfEveryLaterQuery) {
  // S = 2, tau = 2, the decode cache's frozen noise z_l = keyformer_gumbel(seed, l).
  // q0 sees only k0: weight 1. q1 = (sqrt 2, 0) over k0 = 0, k1 = (ln 3, 0): logits (0, ln 3),
  // p = softmax((0 + z0) / 2, (ln 3 + z1) / 2). Scores: token 0 = 1 + p_0, token 1 = p_1 (summed,
  // not divided by the 2 and 1 queries that saw them as h2o's one-shot does).
  const std::vector<float> K = {0, 0, kLn3, 0}, V(4, 1.0f), Q = {0, 0, kR2, 0};
  const double z0 = vq::eviction::keyformer_gumbel(7, 0), z1 = vq::eviction::keyformer_gumbel(7, 1);
  const double e0 = std::exp(z0 / 2), e1 = std::exp((std::log(3.0) + z1) / 2);
  const std::string spec = "keyformer:n_sink=0,temperature=2";
  const auto s = scores_of(spec, 1, 2, 2, K, V, &Q, 1, 7);
  EXPECT_NEAR(s[0], 1.0 + e0 / (e0 + e1), 1e-6);
  EXPECT_NEAR(s[1], e1 / (e0 + e1), 1e-6);
  // Deterministic under a seed, different across seeds; sinks and the recent window are kept.
  EXPECT_EQ(scores_of(spec, 1, 2, 2, K, V, &Q, 1, 7), s);
  EXPECT_NE(scores_of(spec, 1, 2, 2, K, V, &Q, 1, 8), s);
  const auto r = scores_of("keyformer:n_sink=0,recent=1", 1, 2, 2, K, V, &Q, 1, 7);
  EXPECT_TRUE(std::isinf(r[1]) && !std::isinf(r[0]));
  const auto t = scores_of("keyformer:n_sink=1", 1, 2, 2, K, V, &Q, 1, 7);
  EXPECT_TRUE(std::isinf(t[0]) && !std::isinf(t[1]));
}

TEST(OneShotScore, MorphKVFusesTheLastWindowsCausalAttention) {
  // Probes at t = 1, 2 (window 2), q = (sqrt 2, 0); k0 = 0, k1 = (ln 3, 0), k2 = (ln 2, 0):
  //   t = 1: (1/4, 3/4, 0); t = 2: (1/6, 3/6, 2/6).
  // sum: (5/12, 5/4, 1/3) keeps {0, 1} of 2; max: (1/4, 3/4, 1/3) keeps {1, 2}.
  // window 8 is clamped to the 3 positions; t = 0 adds (1, 0, 0).
  const std::vector<float> K = {0, 0, kLn3, 0, kLn2, 0}, V(6, 1.0f);
  const std::vector<float> Q = {0, 0, kR2, 0, kR2, 0};
  auto near = [](const std::vector<double>& a, const std::vector<double>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << i;
  };
  const auto sum = scores_of("morphkv:n_sink=0,window=2", 1, 3, 2, K, V, &Q, 1);
  near(sum, {5.0 / 12, 5.0 / 4, 1.0 / 3});
  EXPECT_EQ(keep_top(sum.data(), 1, 3, 2), (Kept{{0, 1}}));
  const auto mx = scores_of("morphkv:n_sink=0,window=2,fusion=max", 1, 3, 2, K, V, &Q, 1);
  near(mx, {1.0 / 4, 3.0 / 4, 1.0 / 3});
  EXPECT_EQ(keep_top(mx.data(), 1, 3, 2), (Kept{{1, 2}}));
  near(scores_of("morphkv:n_sink=0,window=8", 1, 3, 2, K, V, &Q, 1), {17.0 / 12, 5.0 / 4, 1.0 / 3});
  const auto sk = scores_of("morphkv:n_sink=1,window=2", 1, 3, 2, K, V, &Q, 1);
  EXPECT_TRUE(std::isinf(sk[0]));
  EXPECT_NEAR(sk[1], 5.0 / 4, 1e-6);
}

TEST(OneShotScore, KVzipTakesTheLargestWeightOfTheReplayedKeys) {
  // Keys k0 = 0, k1 = (c, 0), k2 = (0, c) with c^2 = sqrt(2) ln 3, D = 2, so k . k' / sqrt 2 is
  // ln 3 for a key with itself (k1, k2) and 0 otherwise. Every key probes every token (no causal
  // mask): probe 0 (1/3, 1/3, 1/3); probe 1 (1/5, 3/5, 1/5); probe 2 (1/5, 1/5, 3/5).
  // max: (1/3, 3/5, 3/5). Causal, token 0 would get 1 from probe 0 and be kept first.
  const float c = std::sqrt(kR2 * kLn3);
  const std::vector<float> K = {0, 0, c, 0, 0, c}, V(6, 1.0f);
  const std::vector<float> Q = {kR2, 0, 0, 0, 0, kR2};  // ignored by the repeat probe
  const auto s = scores_of("kvzip:n_sink=0", 1, 3, 2, K, V, &Q, 1);
  EXPECT_NEAR(s[0], 1.0 / 3, 1e-6);
  EXPECT_NEAR(s[1], 3.0 / 5, 1e-6);
  EXPECT_NEAR(s[2], 3.0 / 5, 1e-6);
  EXPECT_EQ(s, scores_of("kvzip:n_sink=0", 1, 3, 2, K, V));
  EXPECT_EQ(keep_top(s.data(), 1, 3, 2), (Kept{{1, 2}}));
  EXPECT_TRUE(std::isinf(scores_of("kvzip:n_sink=1", 1, 3, 2, K, V)[0]));
  // probe=latest is tova's one-shot rule, as it is tova's decode rule.
  const auto K2 = vqtest::random_tensor(1, 2, 9, 4, 8), Q2 = vqtest::random_tensor(1, 4, 9, 4, 9);
  const std::vector<float> k2(K2.head(0, 0), K2.head(0, 0) + 2 * 9 * 4), v2(k2.size(), 1.0f),
      q2(Q2.head(0, 0), Q2.head(0, 0) + 4 * 9 * 4);
  EXPECT_EQ(scores_of("kvzip:probe=latest", 2, 9, 4, k2, v2, &q2, 4),
            scores_of("tova", 2, 9, 4, k2, v2, &q2, 4));
  EXPECT_EQ(scores_of("kvzip:probe=latest,query=proxy", 2, 9, 4, k2, v2, &q2, 4),
            scores_of("tova:query=proxy", 2, 9, 4, k2, v2, &q2, 4));
}

TEST(OneShotScore, NestedKVBlendsTheThreeSignalsAtTheContextsEnd) {
  // beta 1/2, keys k0 = (2, 0), k1 = (0, 2), k2 = (4, 0):
  //   t = 1: d2 = 8 (gate 1/2, unused), sigma2 = 8, s = e = (1, 1);
  //   t = 2: d2 = |(4, 0) - (1, 1)|^2 = 10, gate g = 10 / (10 + 8) = 5/9;
  //          s = (1, 1) + ((3, -1)) / 3 = (2, 2/3), e = (5/2, 1/2);
  //          rho = cos(s, e) = (16/3) / (sqrt(40/9) sqrt(13/2)) = 8 / sqrt(65).
  // Logits k_j . x / sqrt 2: s (4, 4/3, 8), e (5, 1, 10), k2 (8, 0, 16), each over sqrt 2.
  const std::vector<float> K = {2, 0, 0, 2, 4, 0}, V(6, 1.0f);
  auto softmax = [](std::vector<double> x) {
    double z = 0;
    for (double& v : x) z += (v = std::exp(v / std::sqrt(2.0)));
    for (double& v : x) v /= z;
    return x;
  };
  const auto ps = softmax({4, 4.0 / 3, 8}), pe = softmax({5, 1, 10}), pk = softmax({8, 0, 16});
  const double g = 5.0 / 9, rho = 8.0 / std::sqrt(65.0);
  const auto s = scores_of("nestedkv:n_sink=0,episodic_rate=0.5", 1, 3, 2, K, V);
  for (size_t j = 0; j < 3; ++j)
    EXPECT_NEAR(s[j], (1 - g) * (rho * ps[j] + (1 - rho) * pe[j]) + g * pk[j], 1e-6) << j;
  EXPECT_EQ(keep_top(s.data(), 1, 3, 1), (Kept{{2}}));
  EXPECT_TRUE(std::isinf(scores_of("nestedkv:n_sink=1,episodic_rate=0.5", 1, 3, 2, K, V)[0]));
}

TEST(OneShotScore, WindowedRulesMatchTheirDecodeCachesFirstEviction) {
  // With budget S - 1 and the context fed token by token, a decode cache first overflows at the
  // last token with the whole context held: morphkv, kvzip and nestedkv then score exactly what
  // their one-shot scorer scores, so the token they evict is the one the keeper drops.
  const int64_t H = 2, S = 14, D = 4;
  const auto K = vqtest::random_tensor(1, H, S, D, 21), V = vqtest::random_tensor(1, H, S, D, 22);
  const auto Q = vqtest::random_tensor(1, 2 * H, S, D, 23);
  const std::vector<float> k(K.head(0, 0), K.head(0, 0) + H * S * D), v(k.size(), 1.0f),
      q(Q.head(0, 0), Q.head(0, 0) + 2 * H * S * D);
  for (const std::string opts :
       {"morphkv:window=5", "morphkv:window=3,fusion=max,query=proxy", "kvzip", "nestedkv"}) {
    const std::string spec = opts + (opts.find(':') == std::string::npos ? ":" : ",") +
                             "n_sink=2,budget=" + std::to_string(S - 1);
    auto cache = vq::make_cache(spec, D);
    famtest::feed(*cache, K, V, &Q, {1});
    const auto s = scores_of(spec, H, S, D, k, v, &q, 2 * H);
    const Kept want = keep_top(s.data(), H, S, S - 1);
    for (int64_t h = 0; h < H; ++h) EXPECT_EQ(famtest::kept(*cache, 0, h), want[h]) << spec;
  }
}

// ---- the cache -----------------------------------------------------------------------------

TEST(OneShotCache, EveryScoredMethodKeepsItsShareThenAppends) {
  const int64_t H = 2, S = 80, D = 8;
  const auto K = vqtest::random_tensor(1, H, S + 3, D, 1),
             V = vqtest::random_tensor(1, H, S + 3, D, 2);
  const auto Q = vqtest::random_tensor(1, 2 * H, S + 3, D, 3);
  ASSERT_GE(famtest::scored_ids().size(), 8u);
  for (const std::string& id : famtest::scored_ids()) {
    const std::string spec = id == "snapkv" ? "snapkv:window=16" : id;
    auto cache = vq::eviction::make_one_shot_cache(vq::eviction::parse_one_shot(spec), 0.75, D);
    const vq::Tensor q = Q.slice_tokens(0, S);
    cache->update(K.slice_tokens(0, S), V.slice_tokens(0, S), &q);
    for (int64_t h = 0; h < H; ++h) EXPECT_EQ(cache->kept(0, h), 20) << id;
    for (int64_t s = S; s < S + 3; ++s) {  // decode: appended, nothing evicted
      const vq::Tensor qs = Q.slice_tokens(s, 1);
      cache->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1), &qs);
    }
    for (int64_t h = 0; h < H; ++h) {
      EXPECT_EQ(cache->kept(0, h), 23) << id;
      const auto kept = famtest::kept(*cache, 0, h);
      EXPECT_EQ(kept.back(), S + 2) << id;
    }
  }
}

TEST(OneShotCache, ComposedSpecStoresCodesAndAdaKVKeepsTheLayerTotal) {
  const int64_t H = 4, S = 64, D = 32;
  const auto K = vqtest::random_tensor(1, H, S, D, 5), V = vqtest::random_tensor(1, H, S, D, 6);
  auto plain = vq::eviction::make_one_shot_cache(vq::eviction::parse_one_shot("knorm"), 0.5, D);
  auto coded =
      vq::eviction::make_one_shot_cache(vq::eviction::parse_one_shot("knorm+q8_0"), 0.5, D);
  plain->update(K, V);
  coded->update(K, V);
  for (int64_t h = 0; h < H; ++h)
    EXPECT_EQ(famtest::kept(*plain, 0, h), famtest::kept(*coded, 0, h));
  EXPECT_LT(coded->stats().content_bytes, 0.6 * plain->stats().content_bytes);

  // Keys of head 0 all have a small norm: AdaKV gives head 0 more than its share.
  vq::Tensor K2 = K;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t d = 0; d < D; ++d) K2.at(0, 0, s, d) *= 0.01f;
  auto ada = vq::eviction::make_one_shot_cache(vq::eviction::parse_one_shot("adakv/knorm"), 0.5, D);
  ada->update(K2, V);
  int64_t total = 0;
  for (int64_t h = 0; h < H; ++h) total += ada->kept(0, h);
  EXPECT_EQ(total, H * 32);
  EXPECT_EQ(ada->kept(0, 0), 64);
  for (int64_t h = 1; h < H; ++h) EXPECT_GE(ada->kept(0, h), 32 / 5);  // int(32 * 0.2) secured
}

TEST(OneShotCache, EveryEvictionMethodButFullHasOneShotScoring) {
  // `full` keeps every token: it has nothing to rank (docs/methods.md).
  for (const auto& m : vq::methods()) {
    if (m.family != vq::Family::Eviction) continue;
    EXPECT_EQ(static_cast<bool>(m.make_scorer), m.id != "full") << m.id;
  }
}

TEST(OneShotCache, RefusesMethodsWithoutOneShotScoring) {
  for (const std::string spec : {"q8_0", "full"}) {
    try {
      vq::eviction::parse_one_shot(spec);
      FAIL() << spec;
    } catch (const vq::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(vq::CacheConfig::parse(spec).method()),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(vq::eviction::parse_one_shot("adakv:alpha=2/knorm"), vq::InvalidArgument);
  EXPECT_THROW(vq::eviction::parse_one_shot("adakv:beta=1/knorm"), vq::InvalidArgument);
  EXPECT_EQ(vq::eviction::parse_one_shot("adakv:alpha=0.5/knorm").to_string(),
            "adakv:alpha=0.5/knorm");
}

// ---- the prefill protocol --------------------------------------------------------------------

TEST(PrefillProtocol, RatioZeroEqualsFullAndCompressionMovesTheDistribution) {
  const vq::Model model = vq::Model::random(vqtest::small_config(48), 11, 0.3f);
  const auto tokens = vqtest::some_tokens(47 * 2, 40, 3);
  const auto windows = vq::eval::make_windows(tokens, 48);
  vq::eval::PrefillOptions o;
  o.methods = {"snapkv:window=8,kernel=3,pool=avg", "adakv/knorm", "bf16"};
  o.ratios = {0.0, 0.875};
  const auto rep = vq::eval::run_prefill_protocol(model, windows, o);
  EXPECT_EQ(rep.context, 36);  // 3/4 of 48
  EXPECT_EQ(rep.n_windows, 2);
  EXPECT_EQ(rep.continuation, 11);
  EXPECT_EQ(rep.predicted_tokens, 22);
  ASSERT_EQ(rep.methods.size(), 5u);
  EXPECT_EQ(rep.methods[0].evict_ratio, 0.0);
  EXPECT_EQ(rep.methods[0].kl_mean, 0.0);  // every token kept: the full cache's arithmetic
  EXPECT_EQ(rep.methods[0].kept_per_head, 36);
  EXPECT_EQ(rep.methods[1].kept_per_head, 4);  // int(36 * 0.125)
  EXPECT_GT(rep.methods[1].kl_mean, 0.0);
  EXPECT_LT(rep.methods[1].bytes_per_token, rep.methods[0].bytes_per_token);
  EXPECT_EQ(rep.methods[2].kl_mean, 0.0);
  EXPECT_GT(rep.methods[3].kl_mean, 0.0);
  EXPECT_EQ(rep.methods[4].spec, "bf16");  // a codec alone runs once
  EXPECT_EQ(rep.methods[4].predicted, 22);
}

TEST(PrefillProtocol, RefusesBadInputNamingTheValue) {
  const vq::Model model = vq::Model::random(vqtest::small_config(48), 11, 0.3f);
  const auto windows = vq::eval::make_windows(vqtest::some_tokens(47, 40, 3), 48);
  auto expect_refused = [&](vq::eval::PrefillOptions o, const std::string& needle) {
    try {
      vq::eval::run_prefill_protocol(model, windows, o);
      FAIL() << needle;
    } catch (const vq::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  vq::eval::PrefillOptions o;
  o.methods = {"knorm"};
  o.ratios = {1.0};
  expect_refused(o, "ratio = 1");
  o.ratios = {0.5};
  o.context = 47;
  expect_refused(o, "context = 47 leaves no continuation");
  o.context = 0;
  o.methods = {"full"};
  expect_refused(o, "'full' has no one-shot scoring");
  o.methods = {"knorm"};
  o.continuation = 20;  // 36 + 20 + 1 > 48
  expect_refused(o, "exceeds the model's context length 48");
}

}  // namespace

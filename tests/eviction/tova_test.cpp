// tova: the token with the lowest attention weight at the current step leaves; no accumulation.
#include <gtest/gtest.h>

#include "eviction/attention_window.hpp"
#include "eviction/eviction_cache.hpp"
#include "eviction/family_util.hpp"
#include "test_util.hpp"

namespace {

using famtest::Vec;

// The rule written out in double: the current step's probe over every held token.
std::vector<int64_t> tova_reference(const vq::Tensor& K, const vq::Tensor* Q, int64_t b, int64_t h,
                                    int64_t budget, int64_t n_sink) {
  return famtest::simulate(K.S(), budget, n_sink, [&](const std::vector<int64_t>& held, int64_t t) {
    return famtest::probe_attention(K, b, h, held, famtest::probe_rows(K, Q, b, h, t), t);
  });
}

TEST(Tova, MatchesTheRuleWithKeyProxies) {
  const auto K = vqtest::random_tensor(1, 2, 80, 8, 21);
  auto cache = vq::make_cache("tova:budget=10,n_sink=2,query=proxy", 8);
  famtest::feed(*cache, K, K, nullptr, {7, 1, 1, 3});
  for (int64_t h = 0; h < 2; ++h)
    EXPECT_EQ(famtest::kept(*cache, 0, h), tova_reference(K, nullptr, 0, h, 10, 2)) << h;
}

TEST(Tova, MatchesTheRuleWithTrueGroupedQueries) {
  const auto K = vqtest::random_tensor(2, 2, 70, 8, 22);
  const auto Q = vqtest::random_tensor(2, 4, 70, 8, 23);  // G = 2
  auto cache = vq::make_cache("tova:budget=9,n_sink=1", 8);
  famtest::feed(*cache, K, K, &Q, {1, 5});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      EXPECT_EQ(famtest::kept(*cache, b, h), tova_reference(K, &Q, b, h, 9, 1)) << b << h;
}

TEST(Tova, KeepsAPlantedTokenThatEveryQueryAttends) {
  // Every query carries a strong component along e0; token 5's key points along e0. Without
  // the plant, token 5 is an ordinary random token and is evicted long before the end.
  const int64_t S = 120, D = 16;
  for (const bool planted : {true, false}) {
    auto K = vqtest::random_tensor(1, 1, S, D, 24, 0.5);
    auto Q = vqtest::random_tensor(1, 1, S, D, 25, 0.5);
    for (int64_t s = 0; s < S; ++s) Q.at(0, 0, s, 0) += 3.0f;
    if (planted) {
      for (int64_t d = 0; d < D; ++d) K.at(0, 0, 5, d) = 0.0f;
      K.at(0, 0, 5, 0) = 3.0f;
    }
    auto cache = vq::make_cache("tova:budget=8,n_sink=0", D);
    famtest::feed(*cache, K, K, &Q, {1});
    const auto p = famtest::kept(*cache);
    const bool has5 = std::find(p.begin(), p.end(), 5) != p.end();
    EXPECT_EQ(has5, planted) << (planted ? "planted token lost" : "control token survived");
  }
}

TEST(Tova, ScoresAreTheCurrentStepOnlyNotAccumulated) {
  const auto K = vqtest::random_tensor(1, 1, 60, 8, 26);
  auto cache = vq::make_cache("tova:budget=6,n_sink=0,query=proxy", 8);
  famtest::feed(*cache, K, K, nullptr, {1});
  const auto& st = dynamic_cast<const vq::eviction::EvictionCache&>(*cache).head_state(0, 0);
  // The kept scores are one softmax minus the evicted token's weight: they sum to at most 1
  // (an accumulated score would have grown with every step).
  double sum = 0;
  for (int64_t i = 0; i < st.n; ++i) sum += st.score[static_cast<size_t>(i)];
  EXPECT_GT(sum, 0.0);
  EXPECT_LE(sum, 1.0 + 1e-12);
}

}  // namespace

// Issue 16: equal logits must give equal weights wherever they sit. Eigen's packet exp and its
// scalar fallback can differ in the last bit, and which elements took which path depended on the
// scratch buffer's address and on n; ties were then decided by heap alignment.
TEST(Tova, EqualLogitsGetBitIdenticalWeightsAtEveryIndexAndLength) {
  vq::Rng rng(77);
  const int64_t D = 8;
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<float> u(D), w(D), q(D);
    for (int64_t d = 0; d < D; ++d) {
      u[d] = static_cast<float>(rng.normal() * 3.0);
      w[d] = static_cast<float>(rng.normal());
      q[d] = static_cast<float>(rng.normal());
    }
    for (int64_t n = 2; n <= 41; ++n) {
      // Every row but one holds the same key w; row n / 2 holds u.
      vq::eviction::RowMatF K(n, D);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t d = 0; d < D; ++d) K(i, d) = i == n / 2 ? u[d] : w[d];
      vq::eviction::AttnScratch s;
      vq::eviction::step_attention(vq::store::Fp32Rows(K.data(), n, D), n, q.data(),
                                   vq::eviction::QueryRows{}, false, s);
      const double tie = s.out[n / 2 == 0 ? 1 : 0];
      for (int64_t i = 0; i < n; ++i) {
        if (i == n / 2) continue;
        ASSERT_EQ(s.out[static_cast<size_t>(i)], tie)
            << "trial " << trial << ", n = " << n << ", row " << i;
      }
    }
  }
}

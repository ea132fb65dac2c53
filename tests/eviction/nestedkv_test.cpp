// nestedkv: the documented stable / episodic / current blend with its surprise gate, key-only.
#include <gtest/gtest.h>

#include "core/rng.hpp"
#include "eviction/family_util.hpp"
#include "test_util.hpp"

namespace {

using famtest::Vec;

// The formulas of nestedkv.cpp's header, in double, for head (b, h).
std::vector<int64_t> nested_reference(const vq::Tensor& K, int64_t b, int64_t h, int64_t budget,
                                      int64_t n_sink, double beta) {
  const int64_t D = K.D();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Vec s(static_cast<size_t>(D)), e(static_cast<size_t>(D));
  double sigma2 = 0, rho = 1;
  bool rho_fixed = false;
  std::vector<int64_t> held;
  for (int64_t t = 0; t < K.S(); ++t) {
    const Vec k = famtest::row(K, b, h, t);
    double gate = 0;
    if (t == 0) {
      s = k;
      e = k;
    } else {
      double d2 = 0;
      for (int64_t d = 0; d < D; ++d) d2 += (k[d] - e[d]) * (k[d] - e[d]);
      const double typical = t == 1 ? d2 : sigma2;
      gate = d2 + typical > 0 ? d2 / (d2 + typical) : 0.0;
      sigma2 += (d2 - sigma2) / static_cast<double>(t);
      for (int64_t d = 0; d < D; ++d) {
        s[d] += (k[d] - s[d]) / static_cast<double>(t + 1);
        e[d] = (1 - beta) * e[d] + beta * k[d];
      }
    }
    held.push_back(t);
    if (static_cast<int64_t>(held.size()) <= budget) continue;
    if (!rho_fixed) {
      const double c = famtest::dot(s, e) / std::sqrt(famtest::dot(s, s) * famtest::dot(e, e));
      rho = std::max(0.0, c);
      rho_fixed = true;
    }
    auto signal = [&](const Vec& x) {
      Vec l(held.size());
      for (size_t j = 0; j < held.size(); ++j)
        l[j] = famtest::dot(famtest::row(K, b, h, held[j]), x) * scale;
      return famtest::softmax(l);
    };
    const Vec ps = signal(s), pe = signal(e), pk = signal(k);
    Vec score(held.size());
    for (size_t j = 0; j < held.size(); ++j)
      score[j] = (1 - gate) * (rho * ps[j] + (1 - rho) * pe[j]) + gate * pk[j];
    const int64_t j = famtest::lowest(held, score, n_sink);
    if (j >= 0) held.erase(held.begin() + j);
  }
  std::sort(held.begin(), held.end());
  return held;
}

TEST(NestedKV, MatchesTheDocumentedFormulas) {
  // A drifting stream (the mean direction rotates) so that rho, the gate and all three signals
  // take non-trivial values.
  vq::Rng rng(101);
  const int64_t S = 90, D = 8;
  vq::Tensor K(1, 2, S, D);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t t = 0; t < S; ++t) {
      const double ang = 0.04 * static_cast<double>(t) * (h + 1);
      for (int64_t d = 0; d < D; ++d) K.at(0, h, t, d) = static_cast<float>(0.7 * rng.normal());
      K.at(0, h, t, 0) += static_cast<float>(2 * std::cos(ang));
      K.at(0, h, t, 1) += static_cast<float>(2 * std::sin(ang));
    }
  for (const double beta : {0.1, 0.5}) {
    auto cache =
        vq::make_cache("nestedkv:budget=14,n_sink=2,episodic_rate=" + std::to_string(beta), D);
    famtest::feed(*cache, K, K, nullptr, {20, 1, 3});
    for (int64_t h = 0; h < 2; ++h)
      EXPECT_EQ(famtest::kept(*cache, 0, h), nested_reference(K, 0, h, 14, 2, beta))
          << "beta " << beta << " head " << h;
  }
}

TEST(NestedKV, OnlyKeysMatter) {
  const auto K = vqtest::random_tensor(1, 1, 50, 8, 102);
  const auto V1 = vqtest::random_tensor(1, 1, 50, 8, 103);
  const auto V2 = vqtest::random_tensor(1, 1, 50, 8, 104);
  const auto Q = vqtest::random_tensor(1, 2, 50, 8, 105);
  auto a = vq::make_cache("nestedkv:budget=10,n_sink=1", 8);
  auto b = vq::make_cache("nestedkv:budget=10,n_sink=1", 8);
  famtest::feed(*a, K, V1, nullptr, {1});
  famtest::feed(*b, K, V2, &Q, {1});
  EXPECT_EQ(famtest::kept(*a), famtest::kept(*b));
}

TEST(NestedKV, SurpriseRoutesTheDecisionToTheCurrentKey) {
  // 20 keys along e0, then token 20 along e1 (weakly). The next key decides its fate:
  //  - an ordinary e0 key: all three signals point along e0 and token 20 is evicted;
  //  - a surprising strong e1 key: the gate opens (g near 1), the current key's own attention
  //    dominates, it reads token 20, and an e0 token leaves instead. (With a fixed 50/50 blend
  //    the memory signals would still evict token 20.)
  const int64_t D = 8;
  for (const bool surprise : {false, true}) {
    vq::Rng rng(106);
    vq::Tensor K(1, 1, 22, D);
    for (int64_t t = 0; t < 22; ++t)
      for (int64_t d = 0; d < D; ++d) K.at(0, 0, t, d) = static_cast<float>(0.3 * rng.normal());
    for (int64_t t = 0; t < 20; ++t) K.at(0, 0, t, 0) += 3.0f;
    K.at(0, 0, 20, 1) += 1.5f;
    if (surprise)
      K.at(0, 0, 21, 1) += 4.0f;
    else
      K.at(0, 0, 21, 0) += 3.0f;
    auto cache = vq::make_cache("nestedkv:budget=12,n_sink=0", D);
    famtest::feed(*cache, K, K, nullptr, {1});
    const auto p = famtest::kept(*cache);
    const bool has20 = std::find(p.begin(), p.end(), 20) != p.end();
    EXPECT_EQ(has20, surprise) << (surprise ? "surprising key" : "ordinary key");
  }
}

}  // namespace

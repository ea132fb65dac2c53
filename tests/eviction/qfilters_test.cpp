// qfilters: keys ranked by their projection on a per-head key-SVD direction that is fixed at
// prefill (sign: along the mean key) and frozen afterwards.
#include <gtest/gtest.h>

#include <Eigen/Dense>

#include "core/rng.hpp"
#include "eviction/family_util.hpp"
#include "test_util.hpp"

namespace {

// First right singular vector of keys [0, T) of head (b, h), pointing with their mean.
Eigen::VectorXd filter_of(const vq::Tensor& K, int64_t b, int64_t h, int64_t T) {
  Eigen::MatrixXd M(T, K.D());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < K.D(); ++d) M(t, d) = K.at(b, h, t, d);
  Eigen::JacobiSVD<Eigen::MatrixXd> svd(M, Eigen::ComputeThinV);
  Eigen::VectorXd u = svd.matrixV().col(0);
  if (u.dot(M.colwise().sum().transpose()) < 0) u = -u;
  return u;
}

// Sinks plus the budget - sinks non-sink tokens of [0, S) with the largest k . u.
std::vector<int64_t> top_projection(const vq::Tensor& K, int64_t b, int64_t h, int64_t S,
                                    const Eigen::VectorXd& u, int64_t budget, int64_t n_sink) {
  std::vector<int64_t> cand, out;
  for (int64_t s = 0; s < std::min(n_sink, S); ++s) out.push_back(s);
  for (int64_t s = n_sink; s < S; ++s) cand.push_back(s);
  auto proj = [&](int64_t s) {
    double p = 0;
    for (int64_t d = 0; d < K.D(); ++d) p += K.at(b, h, s, d) * u[d];
    return p;
  };
  std::sort(cand.begin(), cand.end(), [&](int64_t x, int64_t y) {
    return proj(x) > proj(y) || (proj(x) == proj(y) && x > y);
  });
  for (size_t i = 0; i < cand.size() && static_cast<int64_t>(out.size()) < budget; ++i)
    out.push_back(cand[i]);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(QFilters, KeepsTheLargestProjectionsOnThePrefillFilter) {
  const auto K = vqtest::random_tensor(1, 2, 90, 8, 61);
  auto cache = vq::make_cache("qfilters:budget=14,n_sink=2", 8);
  cache->update(K.slice_tokens(0, 40), K.slice_tokens(0, 40));  // prefill
  for (int64_t s = 40; s < 90; ++s) cache->update(K.slice_tokens(s, 1), K.slice_tokens(s, 1));
  for (int64_t h = 0; h < 2; ++h)
    EXPECT_EQ(famtest::kept(*cache, 0, h),
              top_projection(K, 0, h, 90, filter_of(K, 0, h, 40), 14, 2))
        << "head " << h;
}

TEST(QFilters, FilterIsFrozenAfterPrefill) {
  // Prompt keys lie along +e0; decode keys are dominated by a large e1 component, so a filter
  // re-estimated from every key would point along e1 and choose differently.
  const int64_t T = 30, S = 80, D = 8;
  vq::Rng rng(62);
  vq::Tensor K(1, 1, S, D);
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t d = 0; d < D; ++d) K.at(0, 0, s, d) = static_cast<float>(0.1 * rng.normal());
    K.at(0, 0, s, 0) = static_cast<float>(s < T ? rng.uniform(0.5, 2.0) : rng.uniform(-1.0, 2.0));
    if (s >= T) K.at(0, 0, s, 1) = static_cast<float>(5.0 + 0.5 * rng.normal());
  }
  auto cache = vq::make_cache("qfilters:budget=10,n_sink=0", D);
  cache->update(K.slice_tokens(0, T), K.slice_tokens(0, T));
  for (int64_t s = T; s < S; ++s) cache->update(K.slice_tokens(s, 1), K.slice_tokens(s, 1));
  const auto frozen = top_projection(K, 0, 0, S, filter_of(K, 0, 0, T), 10, 0);
  const auto refit = top_projection(K, 0, 0, S, filter_of(K, 0, 0, S), 10, 0);
  ASSERT_NE(frozen, refit) << "the test data does not separate the two filters";
  EXPECT_EQ(famtest::kept(*cache), frozen);
}

TEST(QFilters, SignPointsWithTheMeanKey) {
  // Keys along +e0 with varying length: the filter points along +e0 and the longest keys stay.
  const int64_t S = 30, D = 4;
  vq::Tensor K(1, 1, S, D);
  for (int64_t s = 0; s < S; ++s) K.at(0, 0, s, 0) = static_cast<float>(1 + (s * 7) % S);
  auto cache = vq::make_cache("qfilters:budget=5,n_sink=0", D);
  cache->update(K, K);
  std::vector<int64_t> want;
  for (int64_t s = 0; s < S; ++s)
    if (1 + (s * 7) % S > S - 5) want.push_back(s);
  EXPECT_EQ(famtest::kept(*cache), want);
}

TEST(QFilters, OneTokenAtATimeFixesTheFilterAtTheFirstOverflow) {
  const auto K = vqtest::random_tensor(1, 1, 60, 8, 63);
  auto cache = vq::make_cache("qfilters:budget=12,n_sink=1", 8);
  famtest::feed(*cache, K, K, nullptr, {1});
  EXPECT_EQ(famtest::kept(*cache), top_projection(K, 0, 0, 60, filter_of(K, 0, 0, 13), 12, 1));
}

}  // namespace

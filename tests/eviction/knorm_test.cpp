// knorm: the non-sink tokens kept are exactly the lowest-L2-norm keys seen so far.
#include <gtest/gtest.h>

#include <numeric>

#include "core/rng.hpp"
#include "eviction/family_util.hpp"
#include "test_util.hpp"

namespace {

TEST(KNorm, KeepsTheLowestNormKeys) {
  // Keys with widely varying scales so norms differ clearly.
  vq::Rng rng(7);
  const int64_t S = 70, D = 8, budget = 12, n_sink = 2;
  vq::Tensor K(1, 2, S, D);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t s = 0; s < S; ++s) {
      const double scale = rng.uniform(0.1, 3.0);
      for (int64_t d = 0; d < D; ++d) K.at(0, h, s, d) = static_cast<float>(scale * rng.normal());
    }
  const auto V = vqtest::random_tensor(1, 2, S, D, 8);
  auto cache = vq::make_cache("knorm:budget=12,n_sink=2", D);
  famtest::feed(*cache, K, V, nullptr, {9, 1, 1, 4});
  for (int64_t h = 0; h < 2; ++h) {
    std::vector<int64_t> order;
    for (int64_t s = n_sink; s < S; ++s) order.push_back(s);
    auto norm = [&](int64_t s) {
      const auto r = famtest::row(K, 0, h, s);
      return famtest::dot(r, r);
    };
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return norm(a) < norm(b); });
    std::vector<int64_t> want = {0, 1};
    want.insert(want.end(), order.begin(), order.begin() + (budget - n_sink));
    std::sort(want.begin(), want.end());
    EXPECT_EQ(famtest::kept(*cache, 0, h), want) << "head " << h;
  }
}

TEST(KNorm, OnlyTheKeyNormMatters) {
  // Same keys, different values and queries: same selection.
  const auto K = vqtest::random_tensor(1, 1, 40, 8, 9);
  const auto V1 = vqtest::random_tensor(1, 1, 40, 8, 10);
  const auto V2 = vqtest::random_tensor(1, 1, 40, 8, 11);
  const auto Q = vqtest::random_tensor(1, 2, 40, 8, 12);
  auto a = vq::make_cache("knorm:budget=8,n_sink=0", 8);
  auto b = vq::make_cache("knorm:budget=8,n_sink=0", 8);
  famtest::feed(*a, K, V1, nullptr, {40});
  famtest::feed(*b, K, V2, &Q, {1});
  EXPECT_EQ(famtest::kept(*a), famtest::kept(*b));
}

}  // namespace

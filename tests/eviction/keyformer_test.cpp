// keyformer: H2O over a Gumbel-softmax with noise frozen per (layer seed, position).
#include <gtest/gtest.h>

#include "eviction/family_util.hpp"
#include "eviction/keyformer.hpp"
#include "test_util.hpp"

namespace {

using famtest::Vec;

std::vector<int64_t> keyformer_reference(const vq::Tensor& K, const vq::Tensor* Q, int64_t b,
                                         int64_t h, int64_t budget, int64_t n_sink, int64_t recent,
                                         double tau, uint64_t seed) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(K.D()));
  std::vector<int64_t> held;
  Vec score;
  for (int64_t t = 0; t < K.S(); ++t) {
    if (held.empty()) {
      held.push_back(t);
      score.push_back(1.0);
    } else {
      const auto probes = famtest::probe_rows(K, Q, b, h, t);
      Vec acc(held.size(), 0.0);
      for (const Vec& q : probes) {
        Vec l(held.size());
        for (size_t j = 0; j < held.size(); ++j)
          l[j] = (famtest::dot(famtest::row(K, b, h, held[j]), q) * scale +
                  vq::eviction::keyformer_gumbel(seed, held[j])) /
                 tau;
        const Vec p = famtest::softmax(l);
        for (size_t j = 0; j < held.size(); ++j)
          acc[j] += p[j] / static_cast<double>(probes.size());
      }
      for (size_t j = 0; j < held.size(); ++j) score[j] += acc[j];
      held.push_back(t);
      score.push_back(0.0);
    }
    if (static_cast<int64_t>(held.size()) > budget) {
      int64_t best = -1;
      for (size_t j = 0; j < held.size(); ++j) {
        if (held[j] < n_sink || held[j] >= t + 1 - recent) continue;
        if (best < 0 || score[j] < score[static_cast<size_t>(best)]) best = static_cast<int64_t>(j);
      }
      if (best >= 0) {
        held.erase(held.begin() + best);
        score.erase(score.begin() + best);
      }
    }
  }
  std::sort(held.begin(), held.end());
  return held;
}

std::unique_ptr<vq::KVCache> make(const std::string& spec, int64_t D, uint64_t seed) {
  return vq::make_cache(vq::CacheConfig::parse(spec), D, 0, 1, seed);
}

TEST(Keyformer, MatchesTheGumbelH2ORule) {
  const auto K = vqtest::random_tensor(1, 2, 60, 8, 71);
  const auto Q = vqtest::random_tensor(1, 4, 60, 8, 72);
  for (const double tau : {0.5, 2.0})
    for (const bool queries : {false, true}) {
      const std::string spec =
          "keyformer:budget=10,n_sink=1,recent=2,temperature=" + std::to_string(tau) +
          (queries ? "" : ",query=proxy");
      auto cache = make(spec, 8, 1234);
      famtest::feed(*cache, K, K, queries ? &Q : nullptr, {5, 1});
      for (int64_t h = 0; h < 2; ++h)
        EXPECT_EQ(famtest::kept(*cache, 0, h),
                  keyformer_reference(K, queries ? &Q : nullptr, 0, h, 10, 1, 2, tau, 1234))
            << spec << " head " << h;
    }
}

TEST(Keyformer, DeterministicUnderASeedAndDifferentAcrossSeeds) {
  // Near-zero keys: the logits are nearly equal, so the frozen noise decides which of the older
  // tokens leave (a recent window is needed: without one, as in h2o, the newcomer's zero score
  // makes it the victim whatever the noise).
  const auto K = vqtest::random_tensor(1, 1, 50, 8, 73, 0.01);
  const std::string spec = "keyformer:budget=10,n_sink=0,recent=4";
  auto a = make(spec, 8, 5), b = make(spec, 8, 5), c = make(spec, 8, 6);
  famtest::feed(*a, K, K, nullptr, {1});
  famtest::feed(*b, K, K, nullptr, {1});
  famtest::feed(*c, K, K, nullptr, {1});
  EXPECT_EQ(famtest::kept(*a), famtest::kept(*b));
  EXPECT_NE(famtest::kept(*a), famtest::kept(*c));
}

TEST(Keyformer, NoiseIsAFunctionOfSeedAndPositionOnly) {
  // The same keys in two heads and fed in different chunkings give the same selection.
  const auto K1 = vqtest::random_tensor(1, 1, 40, 8, 74);
  vq::Tensor K2(1, 2, 40, 8);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t s = 0; s < 40; ++s)
      for (int64_t d = 0; d < 8; ++d) K2.at(0, h, s, d) = K1.at(0, 0, s, d);
  auto one = make("keyformer:budget=9,n_sink=1", 8, 77);
  auto two = make("keyformer:budget=9,n_sink=1", 8, 77);
  famtest::feed(*one, K1, K1, nullptr, {40});
  famtest::feed(*two, K2, K2, nullptr, {1, 3});
  EXPECT_EQ(famtest::kept(*two, 0, 0), famtest::kept(*one));
  EXPECT_EQ(famtest::kept(*two, 0, 1), famtest::kept(*one));
  // The noise is a standard Gumbel sample: mean ~0.5772 (Euler-Mascheroni), variance pi^2/6.
  double sum = 0, sq = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double z = vq::eviction::keyformer_gumbel(3, i);
    sum += z;
    sq += z * z;
  }
  const double mean = sum / n, var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.5772, 0.03);
  EXPECT_NEAR(var, 1.6449, 0.08);
}

}  // namespace

// kvzip: tokens scored by the largest attention a replay of the kept keys places on them;
// with probe=latest the rule is exactly tova.
#include <gtest/gtest.h>

#include "eviction/family_util.hpp"
#include "test_util.hpp"

namespace {

using famtest::Vec;

// Repeat-probe scores over `held`: max over probe rows i (every held key) of softmax_j(k_i . K).
Vec repeat_scores(const vq::Tensor& K, int64_t b, int64_t h, const std::vector<int64_t>& held) {
  Vec best(held.size(), 0.0);
  for (int64_t i : held) {
    const Vec a = famtest::probe_attention(K, b, h, held, {famtest::row(K, b, h, i)},
                                           std::numeric_limits<int64_t>::max());
    for (size_t j = 0; j < held.size(); ++j) best[j] = std::max(best[j], a[j]);
  }
  return best;
}

// Reference: each update appends its chunk; when over budget, one round over held + chunk
// removes the (T - budget) lowest (score, position) non-sinks.
std::vector<int64_t> repeat_reference(const vq::Tensor& K, int64_t b, int64_t h, int64_t budget,
                                      int64_t n_sink, const std::vector<int64_t>& chunks) {
  std::vector<int64_t> held;
  int64_t s = 0;
  for (size_t c = 0; s < K.S(); ++c) {
    const int64_t n = std::min(chunks[c % chunks.size()], K.S() - s);
    for (int64_t t = s; t < s + n; ++t) held.push_back(t);
    s += n;
    const int64_t excess = static_cast<int64_t>(held.size()) - budget;
    if (excess <= 0) continue;
    const Vec sc = repeat_scores(K, b, h, held);
    std::vector<size_t> idx;
    for (size_t j = 0; j < held.size(); ++j)
      if (held[j] >= n_sink) idx.push_back(j);
    std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
      return sc[x] < sc[y] || (sc[x] == sc[y] && held[x] < held[y]);
    });
    std::vector<char> drop(held.size(), 0);
    for (int64_t e = 0; e < excess && e < static_cast<int64_t>(idx.size()); ++e) drop[idx[e]] = 1;
    std::vector<int64_t> next;
    for (size_t j = 0; j < held.size(); ++j)
      if (!drop[j]) next.push_back(held[j]);
    held = next;
  }
  std::sort(held.begin(), held.end());
  return held;
}

TEST(KVzip, LatestProbeEqualsTovaExactly) {
  uint64_t seed = 81;
  for (const char* opts :
       {"budget=8,n_sink=2,query=proxy", "budget=11,n_sink=0", "budget=6,n_sink=3"}) {
    for (const std::vector<int64_t>& chunks :
         {std::vector<int64_t>{1}, std::vector<int64_t>{25, 1, 4}}) {
      const auto K = vqtest::random_tensor(2, 2, 80, 8, seed++);
      const auto V = vqtest::random_tensor(2, 2, 80, 8, seed++);
      const auto Q = vqtest::random_tensor(2, 4, 80, 8, seed++);
      auto tova = vq::make_cache(std::string("tova:") + opts, 8);
      auto zip = vq::make_cache(std::string("kvzip:probe=latest,") + opts, 8);
      famtest::feed(*tova, K, V, &Q, chunks);
      famtest::feed(*zip, K, V, &Q, chunks);
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t h = 0; h < 2; ++h)
          EXPECT_EQ(famtest::kept(*zip, b, h), famtest::kept(*tova, b, h)) << opts;
    }
  }
}

TEST(KVzip, RepeatProbeMatchesTheReplayRule) {
  const auto K = vqtest::random_tensor(1, 2, 70, 8, 91);
  for (const std::vector<int64_t>& chunks :
       {std::vector<int64_t>{1}, std::vector<int64_t>{30, 1, 1, 5}}) {
    auto cache = vq::make_cache("kvzip:budget=12,n_sink=2", 8);
    famtest::feed(*cache, K, K, nullptr, chunks);
    for (int64_t h = 0; h < 2; ++h)
      EXPECT_EQ(famtest::kept(*cache, 0, h), repeat_reference(K, 0, h, 12, 2, chunks))
          << "first chunk " << chunks[0] << " head " << h;
  }
}

TEST(KVzip, RepeatProbeIsKeyBased) {
  // Values and supplied queries do not change the selection of the repeat probe.
  const auto K = vqtest::random_tensor(1, 1, 50, 8, 92);
  const auto V = vqtest::random_tensor(1, 1, 50, 8, 93);
  const auto Q = vqtest::random_tensor(1, 2, 50, 8, 94);
  auto a = vq::make_cache("kvzip:budget=9,n_sink=1", 8);
  auto b = vq::make_cache("kvzip:budget=9,n_sink=1", 8);
  famtest::feed(*a, K, K, nullptr, {1});
  famtest::feed(*b, K, V, &Q, {1});
  EXPECT_EQ(famtest::kept(*a), famtest::kept(*b));
}

TEST(KVzip, RepeatProbeLargeRoundUsesBlocks) {
  // More than one block of 128 probe rows in a single round (a 300-token prompt).
  const auto K = vqtest::random_tensor(1, 1, 300, 4, 95);
  auto cache = vq::make_cache("kvzip:budget=20,n_sink=1", 4);
  famtest::feed(*cache, K, K, nullptr, {300});
  EXPECT_EQ(famtest::kept(*cache), repeat_reference(K, 0, 0, 20, 1, {300}));
}

}  // namespace

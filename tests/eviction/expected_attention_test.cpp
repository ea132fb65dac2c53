// expected_attention's decode-time rescore interval: with rescore=r the held tokens are rescored
// every r-th eviction; tokens that arrived since the last rescore are kept until then. rescore=0
// (the default) is every head_dim-th eviction, at most (budget - n_sink) / 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "eviction/family_util.hpp"
#include "eviction/methods.hpp"
#include "test_util.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/errors.hpp"

namespace {

TEST(ExpectedAttention, RescoreIntervalKeepsNewcomersUntilTheNextRescore) {
  const int64_t S = 60, D = 8, budget = 8, r = 4;
  const vq::Tensor K = vqtest::random_tensor(1, 1, S, D, 41);
  const vq::Tensor V = vqtest::random_tensor(1, 1, S, D, 42);
  auto every =
      vq::make_cache(vq::CacheConfig::parse("expected_attention:budget=8,n_sink=0,rescore=1"), D);
  auto lazy = vq::make_cache(
      vq::CacheConfig::parse("expected_attention:budget=8,n_sink=0,rescore=4,future=16"), D);
  auto lazy_same = vq::make_cache(
      vq::CacheConfig::parse("expected_attention:budget=8,n_sink=0,rescore=1,future=16"), D);
  bool differ = false;
  for (int64_t s = 0; s < S; ++s) {
    for (auto* c : {every.get(), lazy.get(), lazy_same.get()})
      c->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
    EXPECT_EQ(lazy->kept(0, 0), std::min<int64_t>(s + 1, budget));
    if (s < budget) continue;
    const int64_t e = s - budget;  // eviction index: rescored when e % r == 0
    const auto kept = famtest::kept(*lazy, 0, 0);
    for (int64_t back = 0; back < e % r; ++back)
      EXPECT_NE(std::find(kept.begin(), kept.end(), s - back), kept.end())
          << "token " << s - back << " evicted before its first rescore (step " << s << ")";
    differ = differ || kept != famtest::kept(*lazy_same, 0, 0);
  }
  EXPECT_TRUE(differ) << "rescore=4 made the same choices as rescoring every token";
  EXPECT_THROW(vq::CacheConfig::parse("expected_attention:rescore=-1"), vq::InvalidArgument);
}

TEST(ExpectedAttention, DefaultRescoreIsHeadDimWithinTheCap) {
  // D = 8: every 8th eviction at budget 24 (cap 11); at budget 10, n_sink 2 the cap (4) holds.
  const int64_t S = 90, D = 8;
  const vq::Tensor K = vqtest::random_tensor(1, 2, S, D, 43);
  const vq::Tensor V = vqtest::random_tensor(1, 2, S, D, 44);
  const vq::Tensor Q = vqtest::random_tensor(1, 4, S, D, 45);
  for (const auto& [opts, r] :
       {std::pair<std::string, int64_t>{"budget=24,n_sink=2", 8}, {"budget=10,n_sink=2", 4}}) {
    const std::string base = "expected_attention:future=16," + opts;
    ASSERT_EQ(vq::eviction::rescore_interval(vq::CacheConfig::parse(base), D), r) << opts;
    auto dflt = vq::make_cache(vq::CacheConfig::parse(base), D);
    auto expl = vq::make_cache(vq::CacheConfig::parse(base + ",rescore=" + std::to_string(r)), D);
    auto one = vq::make_cache(vq::CacheConfig::parse(base + ",rescore=1"), D);
    famtest::feed(*dflt, K, V, &Q, {1});
    famtest::feed(*expl, K, V, &Q, {1});
    famtest::feed(*one, K, V, &Q, {1});
    bool differ = false;
    for (int64_t h = 0; h < 2; ++h) {
      EXPECT_EQ(famtest::kept(*dflt, 0, h), famtest::kept(*expl, 0, h)) << opts << " head " << h;
      differ = differ || famtest::kept(*dflt, 0, h) != famtest::kept(*one, 0, h);
    }
    EXPECT_TRUE(differ) << opts << ": the default made rescore=1's choices";
  }
}

}  // namespace

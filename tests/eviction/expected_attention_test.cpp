// expected_attention's decode-time rescore interval: with rescore=r the held tokens are rescored
// every r-th eviction; tokens that arrived since the last rescore are kept until then.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "eviction/family_util.hpp"
#include "test_util.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/errors.hpp"

namespace {

TEST(ExpectedAttention, RescoreIntervalKeepsNewcomersUntilTheNextRescore) {
  const int64_t S = 60, D = 8, budget = 8, r = 4;
  const vq::Tensor K = vqtest::random_tensor(1, 1, S, D, 41);
  const vq::Tensor V = vqtest::random_tensor(1, 1, S, D, 42);
  auto every = vq::make_cache(vq::CacheConfig::parse("expected_attention:budget=8,n_sink=0"), D);
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
  EXPECT_THROW(vq::CacheConfig::parse("expected_attention:rescore=0"), vq::InvalidArgument);
}

}  // namespace

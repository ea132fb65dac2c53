#include <gtest/gtest.h>

#include <cmath>

#include "eviction/eviction_cache.hpp"
#include "test_util.hpp"
#include "veloxquant/cache.hpp"

namespace {

const vq::eviction::HeadState& state(const vq::KVCache& c) {
  return dynamic_cast<const vq::eviction::EvictionCache&>(c).head_state(0, 0);
}

TEST(H2O, FirstTokenStartsAtOneNewcomersAtZeroMassAccumulates) {
  auto cache = vq::make_cache("h2o:budget=16,n_sink=0", 4);
  auto K = vqtest::random_tensor(1, 1, 3, 4, 1);
  cache->update(K.slice_tokens(0, 1), K.slice_tokens(0, 1));
  EXPECT_EQ(state(*cache).score[0], 1.0);
  cache->update(K.slice_tokens(1, 1), K.slice_tokens(1, 1));
  // token 0 received all of token 1's attention (it was the only stored key)
  EXPECT_DOUBLE_EQ(state(*cache).score[0], 2.0);
  EXPECT_EQ(state(*cache).score[1], 0.0);
  cache->update(K.slice_tokens(2, 1), K.slice_tokens(2, 1));
  const auto& st = state(*cache);
  EXPECT_NEAR(st.score[0] + st.score[1], 3.0, 1e-12);  // one unit of mass per step
  EXPECT_EQ(st.score[2], 0.0);
}

TEST(H2O, EvictsLowestMassOutsideSinksAndRecentWindow) {
  auto K = vqtest::random_tensor(1, 1, 50, 8, 2);
  auto cache = vq::make_cache("h2o:budget=10,n_sink=2,recent=3", 8);
  for (int64_t s = 0; s < 50; ++s) {
    auto r = cache->update_and_fetch(K.slice_tokens(s, 1), K.slice_tokens(s, 1));
    ASSERT_LE(r.n_kept, 10);
    if (s >= 4) {
      // sinks and the last three positions are always present
      for (int64_t p : {int64_t{0}, int64_t{1}, s - 2, s - 1, s})
        ASSERT_NE(std::find(r.positions.begin(), r.positions.end(), p), r.positions.end())
            << "position " << p << " at step " << s;
    }
  }
}

TEST(H2O, TiesGoToTheLowestPosition) {
  // Identical keys: every stored token gets the same attention, so older tokens always have at
  // least as much mass; with recent=0 the newcomer (score 0) is the unique minimum and is evicted.
  vq::Tensor K(1, 1, 12, 4);
  for (int64_t i = 0; i < K.numel(); ++i) K.data()[i] = 0.5f;
  auto cache = vq::make_cache("h2o:budget=5,n_sink=0", 4);
  cache->update(K, K);
  EXPECT_EQ(cache->fetch().positions, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(H2O, DecayShrinksOldMass) {
  auto K = vqtest::random_tensor(1, 1, 2, 4, 3);
  auto cache = vq::make_cache("h2o:budget=16,n_sink=0,decay=0.5", 4);
  cache->update(K, K);
  EXPECT_DOUBLE_EQ(state(*cache).score[0], 0.5 * 1.0 + 1.0);
}

}  // namespace

// streaming_llm: the sinks plus exactly the most recent tokens, whatever the content or chunking.
#include <gtest/gtest.h>

#include "eviction/family_util.hpp"
#include "test_util.hpp"

namespace {

std::vector<int64_t> expected_window(int64_t seen, int64_t budget, int64_t n_sink) {
  std::vector<int64_t> p;
  if (seen <= budget) {
    for (int64_t i = 0; i < seen; ++i) p.push_back(i);
    return p;
  }
  for (int64_t i = 0; i < n_sink; ++i) p.push_back(i);
  for (int64_t i = seen - (budget - n_sink); i < seen; ++i) p.push_back(i);
  return p;
}

TEST(StreamingLLM, KeepsSinksAndTheLastTokensExactly) {
  const auto K = vqtest::random_tensor(2, 3, 90, 8, 1);
  const auto V = vqtest::random_tensor(2, 3, 90, 8, 2);
  auto cache = vq::make_cache("streaming_llm:budget=10,n_sink=3", 8);
  const std::vector<int64_t> chunks = {1, 5, 13, 2, 1, 1, 7};
  int64_t s = 0;
  for (size_t i = 0; s < 90; ++i) {
    const int64_t n = std::min<int64_t>(chunks[i % chunks.size()], 90 - s);
    cache->update(K.slice_tokens(s, n), V.slice_tokens(s, n));
    s += n;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 3; ++h)
        ASSERT_EQ(famtest::kept(*cache, b, h), expected_window(s, 10, 3))
            << "after " << s << " tokens, head (" << b << ", " << h << ")";
  }
}

TEST(StreamingLLM, NoSinksIsAPureSlidingWindow) {
  const auto K = vqtest::random_tensor(1, 1, 40, 4, 3);
  auto cache = vq::make_cache("streaming_llm:budget=6,n_sink=0", 4);
  famtest::feed(*cache, K, K, nullptr, {3});
  EXPECT_EQ(famtest::kept(*cache), (std::vector<int64_t>{34, 35, 36, 37, 38, 39}));
}

TEST(StreamingLLM, KeptRowsAreTheInputRows) {
  const auto K = vqtest::random_tensor(1, 2, 25, 4, 4);
  const auto V = vqtest::random_tensor(1, 2, 25, 4, 5);
  auto cache = vq::make_cache("streaming_llm:budget=5,n_sink=1", 4);
  auto r = cache->update_and_fetch(K, V);
  ASSERT_EQ(r.n_kept, 5);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 5; ++i) {
      const int64_t p = r.positions[static_cast<size_t>(h * 5 + i)];
      for (int64_t d = 0; d < 4; ++d) {
        ASSERT_EQ(r.keys.at(0, h, i, d), vq::round_to_fp16(K.at(0, h, p, d)));  // stored at fp16
        ASSERT_EQ(r.values.at(0, h, i, d), vq::round_to_fp16(V.at(0, h, p, d)));
      }
    }
}

}  // namespace

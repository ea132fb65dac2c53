// snapkv: one-shot prompt compression by the pooled votes of the observation window, then the
// documented decode rule (drain the prompt by score, then slide over the recent tokens).
#include <gtest/gtest.h>

#include <limits>

#include "eviction/family_util.hpp"
#include "test_util.hpp"

namespace {

using famtest::Vec;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Prompt {
  std::vector<int64_t> kept;  // ascending
  Vec retention;              // per position: pooled vote (prefix) or +inf (window)
};

// The prompt rule of snapkv.cpp's header, in double, for tokens [0, T) of head (b, h).
Prompt snap_reference(const vq::Tensor& K, const vq::Tensor* Q, int64_t b, int64_t h, int64_t T,
                      int64_t budget, int64_t n_sink, int64_t window, int64_t kernel,
                      bool max_pool) {
  const int64_t sinks = std::min(n_sink, T);
  const int64_t w = std::min({window, T, budget - sinks});
  std::vector<int64_t> all(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) all[static_cast<size_t>(t)] = t;
  Vec votes(static_cast<size_t>(T), 0.0);
  for (int64_t p = T - w; p < T; ++p) {
    const Vec a = famtest::probe_attention(K, b, h, all, famtest::probe_rows(K, Q, b, h, p), p);
    for (int64_t t = 0; t < T; ++t) votes[static_cast<size_t>(t)] += a[static_cast<size_t>(t)];
  }
  Prompt out;
  out.retention.assign(static_cast<size_t>(T), kInf);
  const int64_t P = T - w;
  for (int64_t j = 0; j < P; ++j) {
    double pooled = max_pool ? -kInf : 0.0;
    int64_t cnt = 0;
    for (int64_t u = std::max<int64_t>(0, j - kernel / 2); u <= std::min(P - 1, j + kernel / 2);
         ++u, ++cnt)
      pooled = max_pool ? std::max(pooled, votes[static_cast<size_t>(u)])
                        : pooled + votes[static_cast<size_t>(u)];
    out.retention[static_cast<size_t>(j)] = max_pool ? pooled : pooled / static_cast<double>(cnt);
  }
  std::vector<int64_t> cand;
  for (int64_t j = n_sink; j < P; ++j) cand.push_back(j);
  std::sort(cand.begin(), cand.end(), [&](int64_t x, int64_t y) {
    const double sx = out.retention[static_cast<size_t>(x)],
                 sy = out.retention[static_cast<size_t>(y)];
    return sx > sy || (sx == sy && x > y);
  });
  const int64_t slots = std::max<int64_t>(0, budget - w - sinks);
  for (int64_t t = 0; t < T; ++t)
    if (t < n_sink || t >= P || T <= budget) out.kept.push_back(t);
  if (T > budget)
    for (int64_t i = 0; i < slots && i < static_cast<int64_t>(cand.size()); ++i)
      out.kept.push_back(cand[static_cast<size_t>(i)]);
  std::sort(out.kept.begin(), out.kept.end());
  return out;
}

// Decode after the prompt: each token appended with +inf, over budget the lowest
// (retention, position) non-sink leaves.
void decode_step(std::vector<int64_t>& held, Vec& retention, int64_t pos, int64_t budget,
                 int64_t n_sink) {
  held.push_back(pos);
  if (static_cast<int64_t>(retention.size()) <= pos)
    retention.resize(static_cast<size_t>(pos + 1), kInf);
  if (static_cast<int64_t>(held.size()) <= budget) return;
  Vec s;
  for (int64_t p : held) s.push_back(retention[static_cast<size_t>(p)]);
  const int64_t j = famtest::lowest(held, s, n_sink);
  held.erase(held.begin() + j);
}

TEST(SnapKV, PromptSelectionMatchesTheRule) {
  const auto K = vqtest::random_tensor(1, 2, 60, 8, 51);
  const auto Q = vqtest::random_tensor(1, 4, 60, 8, 52);
  for (const bool queries : {true, false})
    for (const bool max_pool : {true, false})
      for (const int64_t kernel : {1, 3, 7}) {
        const std::string spec =
            "snapkv:budget=20,n_sink=2,window=8,kernel=" + std::to_string(kernel) +
            ",pool=" + (max_pool ? "max" : "avg") + (queries ? "" : ",query=proxy");
        auto cache = vq::make_cache(spec, 8);
        famtest::feed(*cache, K, K, queries ? &Q : nullptr, {60});
        for (int64_t h = 0; h < 2; ++h)
          EXPECT_EQ(
              famtest::kept(*cache, 0, h),
              snap_reference(K, queries ? &Q : nullptr, 0, h, 60, 20, 2, 8, kernel, max_pool).kept)
              << spec << " head " << h;
      }
}

TEST(SnapKV, KeepsThePromptTokensTheWindowAttendsTo) {
  // Window queries point along e0; prompt tokens 10, 25 and 40 have keys along e0, every other
  // key is small noise. With room for exactly three prefix tokens, those three are kept.
  const int64_t S = 64, D = 8;
  auto K = vqtest::random_tensor(1, 1, S, D, 53, 0.2);
  auto Q = vqtest::random_tensor(1, 1, S, D, 54, 0.2);
  for (int64_t p : {10, 25, 40}) K.at(0, 0, p, 0) = 3.0f;
  for (int64_t s = S - 4; s < S; ++s) Q.at(0, 0, s, 0) = 3.0f;
  auto cache = vq::make_cache("snapkv:budget=7,n_sink=0,window=4,kernel=1", D);
  famtest::feed(*cache, K, K, &Q, {S});
  EXPECT_EQ(famtest::kept(*cache), (std::vector<int64_t>{10, 25, 40, 60, 61, 62, 63}));
}

TEST(SnapKV, DecodeDrainsThePromptByScoreThenSlidesOverRecentTokens) {
  const int64_t T = 40, steps = 30, budget = 16, n_sink = 1;
  const auto K = vqtest::random_tensor(1, 1, T + steps, 8, 55);
  auto cache = vq::make_cache("snapkv:budget=16,n_sink=1,window=4,kernel=3,query=proxy", 8);
  cache->update(K.slice_tokens(0, T), K.slice_tokens(0, T));
  Prompt ref = snap_reference(K, nullptr, 0, 0, T, budget, n_sink, 4, 3, true);
  ASSERT_EQ(famtest::kept(*cache), ref.kept);
  std::vector<int64_t> held = ref.kept;
  for (int64_t s = T; s < T + steps; ++s) {
    cache->update(K.slice_tokens(s, 1), K.slice_tokens(s, 1));
    decode_step(held, ref.retention, s, budget, n_sink);
    std::vector<int64_t> want = held;
    std::sort(want.begin(), want.end());
    ASSERT_EQ(famtest::kept(*cache), want) << "decode step " << s;
  }
  // After 30 decode tokens every scored prompt token is gone: sink + the 15 latest positions.
  std::vector<int64_t> tail = {0};
  for (int64_t p = T + steps - 15; p < T + steps; ++p) tail.push_back(p);
  EXPECT_EQ(famtest::kept(*cache), tail);
}

TEST(SnapKV, OneTokenAtATimeCompressesAtTheFirstOverflow) {
  const int64_t S = 30, budget = 12;
  const auto K = vqtest::random_tensor(1, 1, S, 8, 56);
  const auto Q = vqtest::random_tensor(1, 2, S, 8, 57);
  auto cache = vq::make_cache("snapkv:budget=12,n_sink=2,window=4,kernel=3", 8);
  famtest::feed(*cache, K, K, &Q, {1});
  // Rebuild: the prompt is the first budget + 1 tokens, then decode steps.
  Prompt ref = snap_reference(K, &Q, 0, 0, budget + 1, budget, 2, 4, 3, true);
  std::vector<int64_t> held = ref.kept;
  for (int64_t s = budget + 1; s < S; ++s) decode_step(held, ref.retention, s, budget, 2);
  std::sort(held.begin(), held.end());
  EXPECT_EQ(famtest::kept(*cache), held);
}

TEST(SnapKV, ShortPromptIsKeptWholeAndStillScored) {
  const auto K = vqtest::random_tensor(1, 1, 20, 8, 58);
  auto cache = vq::make_cache("snapkv:budget=12,n_sink=0,window=3,kernel=1,query=proxy", 8);
  cache->update(K.slice_tokens(0, 10), K.slice_tokens(0, 10));
  std::vector<int64_t> first10(10);
  for (int64_t i = 0; i < 10; ++i) first10[static_cast<size_t>(i)] = i;
  EXPECT_EQ(famtest::kept(*cache), first10);
  Prompt ref = snap_reference(K, nullptr, 0, 0, 10, 12, 0, 3, 1, true);
  std::vector<int64_t> held = first10;
  for (int64_t s = 10; s < 20; ++s) {
    cache->update(K.slice_tokens(s, 1), K.slice_tokens(s, 1));
    decode_step(held, ref.retention, s, 12, 0);
  }
  std::sort(held.begin(), held.end());
  EXPECT_EQ(famtest::kept(*cache), held);
}

}  // namespace

// morphkv: retention by the fused attention of the last `window` probes; window = 1 is tova.
#include <gtest/gtest.h>

#include <cmath>

#include "eviction/eviction_cache.hpp"
#include "eviction/family_util.hpp"
#include "test_util.hpp"

namespace {

using famtest::Vec;

std::vector<int64_t> morph_reference(const vq::Tensor& K, const vq::Tensor* Q, int64_t b, int64_t h,
                                     int64_t budget, int64_t n_sink, int64_t window,
                                     bool max_fusion) {
  return famtest::simulate(K.S(), budget, n_sink, [&](const std::vector<int64_t>& held, int64_t t) {
    Vec out(held.size(), 0.0);
    for (int64_t p = std::max<int64_t>(0, t - window + 1); p <= t; ++p) {
      const Vec a = famtest::probe_attention(K, b, h, held, famtest::probe_rows(K, Q, b, h, p), p);
      for (size_t j = 0; j < held.size(); ++j)
        out[j] = max_fusion ? std::max(out[j], a[j]) : out[j] + a[j];
    }
    return out;
  });
}

TEST(MorphKV, WindowOneEqualsTovaExactly) {
  struct Case {
    const char* opts;
    bool queries;
    std::vector<int64_t> chunks;
  };
  const std::vector<Case> cases = {
      {"budget=8,n_sink=2,query=proxy", false, {1}},
      {"budget=8,n_sink=0,query=proxy", false, {17, 1, 3}},
      {"budget=13,n_sink=4", true, {1, 2}},
      {"budget=5,n_sink=1", true, {30, 1}},
  };
  uint64_t seed = 31;
  for (const auto& c : cases) {
    for (const char* fusion : {"sum", "max"}) {
      const auto K = vqtest::random_tensor(2, 2, 90, 8, seed++);
      const auto V = vqtest::random_tensor(2, 2, 90, 8, seed++);
      const auto Q = vqtest::random_tensor(2, 6, 90, 8, seed++);  // G = 3
      auto tova = vq::make_cache(std::string("tova:") + c.opts, 8);
      auto morph =
          vq::make_cache(std::string("morphkv:window=1,fusion=") + fusion + "," + c.opts, 8);
      const vq::Tensor* q = c.queries ? &Q : nullptr;
      // Compare after every update, not only at the end.
      int64_t s = 0;
      for (size_t i = 0; s < 90; ++i) {
        const int64_t n = std::min<int64_t>(c.chunks[i % c.chunks.size()], 90 - s);
        vq::Tensor qs = Q.slice_tokens(s, n);
        tova->update(K.slice_tokens(s, n), V.slice_tokens(s, n), q ? &qs : nullptr);
        morph->update(K.slice_tokens(s, n), V.slice_tokens(s, n), q ? &qs : nullptr);
        s += n;
        for (int64_t b = 0; b < 2; ++b)
          for (int64_t h = 0; h < 2; ++h)
            ASSERT_EQ(famtest::kept(*morph, b, h), famtest::kept(*tova, b, h))
                << c.opts << " fusion=" << fusion << " after " << s << " tokens";
      }
    }
  }
}

TEST(MorphKV, MatchesTheWindowRule) {
  const auto K = vqtest::random_tensor(1, 2, 70, 8, 41);
  const auto Q = vqtest::random_tensor(1, 4, 70, 8, 42);
  for (const bool max_fusion : {false, true}) {
    for (const bool queries : {false, true}) {
      auto cache =
          vq::make_cache(std::string("morphkv:budget=10,n_sink=2,window=4,fusion=") +
                             (max_fusion ? "max" : "sum") + (queries ? "" : ",query=proxy"),
                         8);
      famtest::feed(*cache, K, K, queries ? &Q : nullptr, {6, 1});
      for (int64_t h = 0; h < 2; ++h)
        EXPECT_EQ(famtest::kept(*cache, 0, h),
                  morph_reference(K, queries ? &Q : nullptr, 0, h, 10, 2, 4, max_fusion))
            << "max=" << max_fusion << " queries=" << queries << " head " << h;
    }
  }
}

TEST(MorphKV, CachedMapsMakeTheRecomputedDecisions) {
  // maps=cached keeps each probe's exponentiated logits and only computes the newest probe's;
  // maps=recompute recomputes the whole window every step. Same softmax up to rounding: the
  // kept sets must agree after every update, for both fusions, with and without true queries,
  // fed token by token and in chunks, with ordinary and with sharply peaked attention.
  uint64_t seed = 70;
  for (const float key_scale : {1.0f, 4.0f}) {
    for (const char* fusion : {"sum", "max"}) {
      for (const bool queries : {false, true}) {
        auto K = vqtest::random_tensor(1, 2, 160, 8, seed++, key_scale);
        const auto V = vqtest::random_tensor(1, 2, 160, 8, seed++);
        const auto Q = vqtest::random_tensor(1, 6, 160, 8, seed++);  // G = 3
        const std::string opts = std::string("morphkv:budget=24,n_sink=2,window=8,fusion=") +
                                 fusion + (queries ? "" : ",query=proxy");
        auto cached = vq::make_cache(opts, 8);
        auto recompute = vq::make_cache(opts + ",maps=recompute", 8);
        int64_t s = 0;
        const std::vector<int64_t> chunks = {30, 1, 1, 5, 1};
        for (size_t i = 0; s < 160; ++i) {
          const int64_t n = std::min<int64_t>(chunks[i % chunks.size()], 160 - s);
          vq::Tensor qs = Q.slice_tokens(s, n);
          cached->update(K.slice_tokens(s, n), V.slice_tokens(s, n), queries ? &qs : nullptr);
          recompute->update(K.slice_tokens(s, n), V.slice_tokens(s, n), queries ? &qs : nullptr);
          s += n;
          for (int64_t h = 0; h < 2; ++h)
            ASSERT_EQ(famtest::kept(*cached, 0, h), famtest::kept(*recompute, 0, h))
                << opts << " key scale " << key_scale << " after " << s << " tokens, head " << h;
        }
      }
    }
  }
}

TEST(MorphKV, CachedMapsSurviveUnderflow) {
  // Keys scaled so far that every probe's softmax is one-hot and the rest underflows: once a
  // row's largest entries are evicted its cached mass is below float range and the row is
  // recomputed from the keys. Scores stay finite and in [0, window], the budget holds.
  auto K = vqtest::random_tensor(1, 1, 200, 8, 91, 40.0f);
  const auto V = vqtest::random_tensor(1, 1, 200, 8, 92);
  auto cache = vq::make_cache("morphkv:budget=16,n_sink=0,window=8,query=proxy", 8);
  for (int64_t s = 0; s < 200; ++s) {
    cache->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
    const auto& st = dynamic_cast<const vq::eviction::EvictionCache&>(*cache).head_state(0, 0);
    ASSERT_LE(st.n, 16);
    for (int64_t i = 0; i < st.n; ++i) {
      ASSERT_TRUE(std::isfinite(st.score[static_cast<size_t>(i)])) << "step " << s;
      ASSERT_GE(st.score[static_cast<size_t>(i)], 0.0);
      ASSERT_LE(st.score[static_cast<size_t>(i)], 8.0 + 1e-9);
    }
  }
}

TEST(MorphKV, KeepsWhatTheRecentWindowReadsEvenIfTheCurrentTokenDoesNot) {
  // Token 3 is attended by the queries at steps t-4..t-1 of every window but not by the current
  // one: the queries alternate between a direction that reads token 3 and one that does not.
  // tova (current step only) loses it at a step where the current query looks away; morphkv with
  // a window of 4 always has a reader in its window and keeps it.
  const int64_t S = 100, D = 8;
  auto K = vqtest::random_tensor(1, 1, S, D, 43, 0.3);
  auto Q = vqtest::random_tensor(1, 1, S, D, 44, 0.3);
  for (int64_t d = 0; d < D; ++d) K.at(0, 0, 3, d) = 0.0f;
  K.at(0, 0, 3, 0) = 4.0f;
  for (int64_t s = 0; s < S; ++s) Q.at(0, 0, s, 0) = (s % 4 == 0) ? 4.0f : -4.0f;
  auto morph = vq::make_cache("morphkv:budget=6,n_sink=0,window=4", D);
  auto tova = vq::make_cache("tova:budget=6,n_sink=0", D);
  famtest::feed(*morph, K, K, &Q, {1});
  famtest::feed(*tova, K, K, &Q, {1});
  const auto pm = famtest::kept(*morph), pt = famtest::kept(*tova);
  EXPECT_NE(std::find(pm.begin(), pm.end(), 3), pm.end());
  EXPECT_EQ(std::find(pt.begin(), pt.end(), 3), pt.end());
}

}  // namespace

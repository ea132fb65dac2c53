// Head-adaptive budgets (AdaKV) in the decode protocol (option heads=adaptive of the score-based
// eviction methods), and the prefill protocol's --keep-policy: the method's decode-time policy
// continuing from the one-shot compressed context.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "eval/fidelity.hpp"
#include "eviction/family_util.hpp"
#include "eviction/one_shot.hpp"
#include "model/model_test_util.hpp"
#include "test_util.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"

namespace {

int64_t layer_total(const vq::KVCache& c, int64_t H) {
  int64_t t = 0;
  for (int64_t h = 0; h < H; ++h) t += c.kept(0, h);
  return t;
}

// knorm keeps the smallest keys. Head 0's keys are 10x larger than the others': with adaptive
// budgets the layer evicts head 0's tokens first, down to its safeguard; uniform budgets keep 8
// in every head.
TEST(AdaptiveHeads, LayerHoldsItsTotalAndTheLowestScoredHeadShrinks) {
  const int64_t H = 4, S = 60, D = 8, budget = 8;
  vq::Tensor K = vqtest::random_tensor(1, H, S, D, 21);
  const vq::Tensor V = vqtest::random_tensor(1, H, S, D, 22);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t d = 0; d < D; ++d) K.at(0, 0, s, d) *= 10.0f;
  auto ada = vq::make_cache(
      vq::CacheConfig::parse("knorm:budget=8,n_sink=0,heads=adaptive,safeguard=0.25"), D);
  auto uni = vq::make_cache(vq::CacheConfig::parse("knorm:budget=8,n_sink=0"), D);
  for (int64_t s = 0; s < S; ++s) {
    ada->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
    uni->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
    EXPECT_EQ(layer_total(*ada, H), std::min<int64_t>(H * (s + 1), H * budget)) << "step " << s;
  }
  for (int64_t h = 0; h < H; ++h) EXPECT_EQ(uni->kept(0, h), budget);
  // Head 0 keeps its 2 secured best (int(8 * 0.25)), at most its newest row besides, and the
  // slot of the token that arrives next.
  EXPECT_GE(ada->kept(0, 0), 2);
  EXPECT_LE(ada->kept(0, 0), 4);
  for (int64_t h = 1; h < H; ++h) EXPECT_GT(ada->kept(0, h), budget) << h;
  // The other heads keep what uniform budgets keep, and more: their smallest keys.
  for (int64_t h = 1; h < H; ++h) {
    const auto a = famtest::kept(*ada, 0, h), u = famtest::kept(*uni, 0, h);
    for (int64_t p : u)
      EXPECT_NE(std::find(a.begin(), a.end(), p), a.end()) << "head " << h << " pos " << p;
  }
  EXPECT_EQ(ada->config().to_string(), "knorm:budget=8,n_sink=0,heads=adaptive,safeguard=0.25");
}

// Same scores in every head (identical heads): adaptive budgets change nothing.
TEST(AdaptiveHeads, IdenticalHeadsKeepWhatUniformBudgetsKeep) {
  const int64_t H = 3, S = 40, D = 8;
  const vq::Tensor K1 = vqtest::random_tensor(1, 1, S, D, 31);
  const vq::Tensor V1 = vqtest::random_tensor(1, 1, S, D, 32);
  vq::Tensor K(1, H, S, D), V(1, H, S, D);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t d = 0; d < D; ++d) {
        K.at(0, h, s, d) = K1.at(0, 0, s, d);
        V.at(0, h, s, d) = V1.at(0, 0, s, d);
      }
  for (const std::string base : {"knorm:budget=6", "tova:budget=6", "h2o:budget=8,recent=2"}) {
    auto ada = vq::make_cache(vq::CacheConfig::parse(base + ",heads=adaptive"), D);
    auto uni = vq::make_cache(vq::CacheConfig::parse(base), D);
    famtest::feed(*ada, K, V, nullptr, {1});
    famtest::feed(*uni, K, V, nullptr, {1});
    for (int64_t h = 0; h < H; ++h)
      EXPECT_EQ(famtest::kept(*ada, 0, h), famtest::kept(*uni, 0, h)) << base << " head " << h;
  }
}

TEST(AdaptiveHeads, SafeguardOutsideTheRangeIsRefused) {
  EXPECT_THROW(vq::CacheConfig::parse("h2o:heads=adaptive,safeguard=1.5"), vq::InvalidArgument);
  EXPECT_THROW(vq::CacheConfig::parse("h2o:heads=sometimes"), vq::InvalidArgument);
  // The same rule spelled as the method's option in a one-shot spec.
  const auto spec = vq::eviction::parse_one_shot("knorm:heads=adaptive,safeguard=0.5");
  EXPECT_TRUE(spec.adaptive);
  EXPECT_EQ(spec.alpha, 0.5);
  EXPECT_EQ(spec.to_string(), "knorm:heads=adaptive,safeguard=0.5");
}

// --keep-policy: after the one-shot compression to 20 per head, the method's own policy holds
// every head at 20 through the continuation (without it, the continuation is appended).
TEST(KeepPolicy, EveryScoredMethodHoldsItsCompressedSize) {
  const int64_t H = 2, S = 80, D = 8, more = 6;
  const auto K = vqtest::random_tensor(1, H, S + more, D, 1),
             V = vqtest::random_tensor(1, H, S + more, D, 2);
  const auto Q = vqtest::random_tensor(1, 2 * H, S + more, D, 3);
  ASSERT_GE(famtest::scored_ids().size(), 8u);
  for (const std::string& id : famtest::scored_ids()) {
    const std::string spec = id == "snapkv" ? "snapkv:window=16" : id;
    auto cache = vq::eviction::make_one_shot_cache(vq::eviction::parse_one_shot(spec), 0.75, D, 0,
                                                   1, 0, true);
    auto plain = vq::eviction::make_one_shot_cache(vq::eviction::parse_one_shot(spec), 0.75, D);
    const vq::Tensor q = Q.slice_tokens(0, S);
    cache->update(K.slice_tokens(0, S), V.slice_tokens(0, S), &q);
    plain->update(K.slice_tokens(0, S), V.slice_tokens(0, S), &q);
    for (int64_t h = 0; h < H; ++h) {
      EXPECT_EQ(cache->kept(0, h), 20) << id;
      // The same context rows as the one-shot cache without the policy.
      EXPECT_EQ(famtest::kept(*cache, 0, h), famtest::kept(*plain, 0, h)) << id;
    }
    for (int64_t s = S; s < S + more; ++s) {
      const vq::Tensor qs = Q.slice_tokens(s, 1);
      cache->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1), &qs);
    }
    for (int64_t h = 0; h < H; ++h) EXPECT_EQ(cache->kept(0, h), 20) << id;
  }
}

TEST(KeepPolicy, AdaKVKeepsTheLayerTotalThroughTheContinuation) {
  const int64_t H = 4, S = 64, D = 16, more = 10;
  vq::Tensor K = vqtest::random_tensor(1, H, S + more, D, 5);
  const vq::Tensor V = vqtest::random_tensor(1, H, S + more, D, 6);
  for (int64_t s = 0; s < S + more; ++s)
    for (int64_t d = 0; d < D; ++d) K.at(0, 0, s, d) *= 0.01f;  // head 0: the smallest keys
  auto c = vq::eviction::make_one_shot_cache(vq::eviction::parse_one_shot("adakv/knorm"), 0.5, D, 0,
                                             1, 0, true);
  c->update(K.slice_tokens(0, S), V.slice_tokens(0, S));
  EXPECT_EQ(c->kept(0, 0), 64);  // as the one-shot AdaKV test: head 0 takes every token
  EXPECT_EQ(layer_total(*c, H), H * 32);
  for (int64_t s = S; s < S + more; ++s) {
    c->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
    EXPECT_EQ(layer_total(*c, H), H * 32) << s;
  }
  EXPECT_GT(c->kept(0, 0), 32);
}

TEST(KeepPolicy, PrefillProtocolRunsThePolicyThroughTheContinuation) {
  // Windows of 128: a continuation of 31 tokens, long enough for the appending cache's growth to
  // outweigh the evicting store's fixed per-head buffers.
  const vq::Model model = vq::Model::random(vqtest::small_config(128), 11, 0.3f);
  const auto tokens = vqtest::some_tokens(127 * 2, 40, 3);
  const auto windows = vq::eval::make_windows(tokens, 128);
  vq::eval::PrefillOptions o;
  o.methods = {"h2o:recent=2", "streaming_llm:n_sink=2"};
  o.ratios = {0.5};
  const auto off = vq::eval::run_prefill_protocol(model, windows, o);
  o.keep_policy = true;
  const auto on = vq::eval::run_prefill_protocol(model, windows, o);
  ASSERT_EQ(on.methods.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(on.methods[i].kept_per_head, off.methods[i].kept_per_head);
    // Evicting during the continuation holds fewer bytes per token than appending.
    EXPECT_LT(on.methods[i].bytes_per_token, off.methods[i].bytes_per_token) << on.methods[i].spec;
    EXPECT_NE(on.methods[i].kl_mean, off.methods[i].kl_mean) << on.methods[i].spec;
  }
}

}  // namespace

// `streaming_llm` (Xiao et al., "Efficient Streaming Language Models with Attention Sinks",
// ICLR 2024): keep the first n_sink positions (the attention sinks) and a rolling window of the
// most recent budget - n_sink tokens. Nothing is scored; over budget the oldest non-sink token
// leaves. Positions stay absolute (the paper re-indexes positions inside the cache; here the
// engine applies RoPE at each token's true position, so there is nothing to re-index).
#include <limits>

#include "core/options.hpp"
#include "eviction/eviction_cache.hpp"
#include "eviction/methods.hpp"
#include "eviction/one_shot.hpp"

namespace vq {
namespace {

class StreamingLLMCache final : public eviction::EvictionCache {
 public:
  StreamingLLMCache(const CacheConfig& c, const CacheContext& ctx)
      : EvictionCache(c, ctx, c.get_int("budget"), c.get_int("n_sink")) {}

 protected:
  void on_token(eviction::HeadState& st, const float* k, const float* v, const eviction::QueryRows&,
                int64_t pos) override {
    // The score is the position itself, so the lowest evictable score is the oldest non-sink.
    append(st, k, v, pos, static_cast<double>(pos));
    if (over_budget(st)) {
      const int64_t slot = argmin_score(st, std::numeric_limits<int64_t>::max());
      if (slot >= 0) remove_slot(st, slot);
    }
  }
};

// One shot (kvpress's StreamingLLMPress): the sinks, then the most recent tokens. The score is
// the position (sinks +inf), so the top n_keep are the sinks and the last n_keep - n_sink.
class StreamingLLMScorer final : public OneShotScorer {
 public:
  explicit StreamingLLMScorer(const CacheConfig& c) : n_sink_(c.get_int("n_sink")) {}
  void score(const OneShotInput& in, double* out) const override {
    for (int64_t h = 0; h < in.H; ++h)
      for (int64_t s = 0; s < in.S; ++s)
        out[h * in.S + s] = in.pos0 + s < n_sink_ ? std::numeric_limits<double>::infinity()
                                                  : static_cast<double>(in.pos0 + s);
  }

 private:
  int64_t n_sink_;
};

}  // namespace

MethodInfo streaming_llm_method_info() {
  MethodInfo m;
  m.id = "streaming_llm";
  m.family = Family::Eviction;
  m.description = "attention sinks plus a rolling window of the most recent tokens";
  m.options = {
      eviction::budget_option(),
      opt_int("n_sink", 4, 0, kMaxBudget,
              "leading positions kept forever (the attention sinks); the rest is the window"),
  };
  m.validate = [](const CacheConfig& c) { eviction::check_sinks_below_budget(c); };
  m.make_cache = [](const CacheConfig& c, const CacheContext& ctx) -> std::unique_ptr<KVCache> {
    return std::make_unique<StreamingLLMCache>(c, ctx);
  };
  m.make_scorer = [](const CacheConfig& c) -> std::unique_ptr<OneShotScorer> {
    return std::make_unique<StreamingLLMScorer>(c);
  };
  return m;
}

}  // namespace vq

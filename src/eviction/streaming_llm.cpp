// `streaming_llm` (Xiao et al., "Efficient Streaming Language Models with Attention Sinks",
// ICLR 2024): keep the first n_sink positions (the attention sinks) and a rolling window of the
// most recent budget - n_sink tokens. Nothing is scored; over budget the oldest non-sink token
// leaves. Positions stay absolute (the paper re-indexes positions inside the cache; here the
// engine applies RoPE at each token's true position, so there is nothing to re-index).
#include <limits>

#include "core/options.hpp"
#include "eviction/eviction_cache.hpp"
#include "eviction/methods.hpp"

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
  return m;
}

}  // namespace vq

// `knorm` (Devoto et al., "A Simple and Effective L2 Norm-Based Strategy for KV Cache
// Compression", EMNLP 2024): keys with a low L2 norm tend to receive high attention, so keep the
// lowest-norm keys. The score of a token is fixed when it arrives (-||k||^2); over budget the
// highest-norm non-sink token leaves, so at any time the non-sink tokens kept are exactly the
// budget - (sinks held) lowest-norm keys seen so far (ties: the later position stays).
// Adaptation: the paper leaves the first layers uncompressed; here every layer uses the rule.
#include <cmath>
#include <limits>

#include "core/options.hpp"
#include "eviction/eviction_cache.hpp"
#include "eviction/methods.hpp"
#include "eviction/one_shot.hpp"

namespace vq {
namespace {

class KNormCache final : public eviction::EvictionCache {
 public:
  KNormCache(const CacheConfig& c, const CacheContext& ctx)
      : EvictionCache(c, ctx, c.get_int("budget"), c.get_int("n_sink")) {}

 protected:
  void on_token(eviction::HeadState& st, const float* k, const float* v, const eviction::QueryRows&,
                int64_t pos) override {
    const Eigen::Map<const Eigen::VectorXf> kv(k, head_dim());
    append(st, k, v, pos, -kv.cast<double>().squaredNorm());
    if (over_budget(st)) {
      evict_lowest(st, std::numeric_limits<int64_t>::max());
    }
  }
};

// One shot (kvpress's KnormPress): score -||k||, no sinks.
class KNormScorer final : public OneShotScorer {
 public:
  void score(const OneShotInput& in, double* out) const override {
    for (int64_t h = 0; h < in.H; ++h)
      for (int64_t s = 0; s < in.S; ++s) {
        const Eigen::Map<const Eigen::VectorXf> k(in.key(h, s), in.D);
        out[h * in.S + s] = -std::sqrt(k.cast<double>().squaredNorm());
      }
  }
};

}  // namespace

MethodInfo knorm_method_info() {
  MethodInfo m;
  m.id = "knorm";
  m.family = Family::Eviction;
  m.description = "keep the tokens whose keys have the lowest L2 norm";
  m.options = {
      eviction::budget_option(),
      eviction::n_sink_option(),
  };
  eviction::add_head_budget_options(m.options);
  m.validate = [](const CacheConfig& c) { eviction::check_sinks_below_budget(c); };
  m.make_cache = [](const CacheConfig& c, const CacheContext& ctx) -> std::unique_ptr<KVCache> {
    return std::make_unique<KNormCache>(c, ctx);
  };
  m.make_scorer = [](const CacheConfig&) -> std::unique_ptr<OneShotScorer> {
    return std::make_unique<KNormScorer>();
  };
  return m;
}

}  // namespace vq

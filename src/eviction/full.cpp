// `full`: keeps every token. The reference every other method is measured against.
#include "core/options.hpp"
#include "eviction/eviction_cache.hpp"

namespace vq {
namespace {

class FullCache final : public eviction::EvictionCache {
 public:
  FullCache(const CacheConfig& c, const CacheContext& ctx) : EvictionCache(c, ctx, 0, 0) {}
  bool keeps_scores() const override { return false; }

 protected:
  void process_head(eviction::HeadState& st, const float* K, const float* V,
                    const std::vector<eviction::QueryRows>&, int64_t S, int64_t pos0) override {
    const int64_t D = head_dim();
    for (int64_t s = 0; s < S; ++s) append(st, K + s * D, V + s * D, pos0 + s, 0.0);
  }
};

}  // namespace

MethodInfo full_method_info() {
  MethodInfo m;
  m.id = "full";
  m.family = Family::Eviction;
  m.description =
      "keeps every token, stored as fp16 rows (2 bytes per value; bf16 with +bf16): the "
      "uncompressed reference";
  m.make_cache = [](const CacheConfig& c, const CacheContext& ctx) -> std::unique_ptr<KVCache> {
    return std::make_unique<FullCache>(c, ctx);
  };
  return m;
}

}  // namespace vq

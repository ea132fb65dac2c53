// The cache factory: a spec's method looked up in the registry and built for one layer (or every
// layer). It sits in the methods layer, above the KVCache base class of core/, because it needs
// the registry table.
#include <memory>
#include <string>
#include <vector>

#include "veloxquant/cache.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"

namespace vq {

uint64_t layer_seed(uint64_t seed, int64_t layer) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(layer + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::unique_ptr<KVCache> make_cache(const CacheConfig& config, int64_t head_dim, int64_t layer,
                                    int64_t n_layers, uint64_t seed) {
  VQ_CHECK(!config.method().empty(), InvalidArgument, "make_cache: empty config (no method)");
  VQ_CHECK(layer >= 0 && layer < n_layers, InvalidArgument, "make_cache: layer = ", layer,
           " is outside [0, n_layers = ", n_layers, ")");
  const MethodInfo& m = find_method(config.method());
  CacheContext ctx{head_dim, layer, n_layers, seed, {}};
  if (config.codec() != nullptr) {  // "policy+codec": the policy's cache storing through the codec
    ctx.codec = *config.codec();
    return m.make_cache(config, ctx);
  }
  if (m.make_row_codec) {  // a codec alone: every token kept, stored through it
    ctx.codec = config;
    return find_method("full").make_cache(CacheConfig::parse("full"), ctx);
  }
  return m.make_cache(config, ctx);
}

std::unique_ptr<KVCache> make_cache(const std::string& spec, int64_t head_dim) {
  return make_cache(CacheConfig::parse(spec), head_dim);
}

std::vector<std::unique_ptr<KVCache>> build_caches(const CacheConfig& config, int64_t n_layers,
                                                   int64_t head_dim, uint64_t seed) {
  VQ_CHECK(n_layers >= 1, InvalidArgument, "build_caches: n_layers = ", n_layers, " must be >= 1");
  std::vector<std::unique_ptr<KVCache>> caches;
  caches.reserve(static_cast<size_t>(n_layers));
  for (int64_t l = 0; l < n_layers; ++l)
    caches.push_back(make_cache(config, head_dim, l, n_layers, layer_seed(seed, l)));
  return caches;
}

}  // namespace vq

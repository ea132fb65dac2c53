// Options and factories shared by the transform methods' registry entries.
#pragma once

#include <memory>
#include <vector>

#include "core/options.hpp"
#include "transform/pca_coder.hpp"
#include "transform/transform_cache.hpp"
#include "transform/transform_codec.hpp"
#include "veloxquant/registry.hpp"

namespace vq::transform {

/// bit_budget, chunk_tokens, fit_tokens: the options every PCA method takes.
std::vector<OptionSpec> pca_common_options();
/// bit_choices, beta: the options of the model-driven allocators (dp, waterfill).
std::vector<OptionSpec> allocator_options();

/// Settings of a PCA method from its config. `rule` is the method's allocation rule; kvtc reads
/// its `alloc` option instead when `from_alloc_option`.
PcaSettings pca_settings(const CacheConfig& c, int64_t head_dim, AllocRule rule,
                         bool from_alloc_option);
TransformSettings pca_transform_settings(const CacheConfig& c, int64_t head_dim);

/// Fills make_cache and make_codec of a PCA method.
void set_pca_factories(MethodInfo& m, AllocRule rule, bool from_alloc_option);

}  // namespace vq::transform

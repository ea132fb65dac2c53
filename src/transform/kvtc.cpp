// `kvtc`: KVTC-adapted transform coding (spec: kvtc.txt). Per (batch, head), keys and values
// independently: local PCA fitted once on the first fit_tokens tokens and frozen, a DP-optimal
// integer bit allocation over the components under bit_budget bits per token (0 bits drops a
// component), per-chunk affine quantization and order-0 Huffman coding. See docs/kvtc.md.
#include "coding/bit_allocation.hpp"
#include "transform/method_common.hpp"

namespace vq {

MethodInfo kvtc_method_info() {
  MethodInfo m;
  m.id = "kvtc";
  m.description =
      "local PCA + DP-optimal per-component bit allocation (0 = drop) + Huffman coding, K and V";
  m.options = transform::pca_common_options();
  for (auto& o : transform::allocator_options()) m.options.push_back(o);
  m.options.push_back(opt_choice("alloc", "dp", {"dp", "waterfill"},
                                 "allocator: exact DP, or continuous water-filling snapped to "
                                 "bit_choices"));
  m.validate = [](const CacheConfig& c) {
    coding::normalize_bit_choices(c.get_int_list("bit_choices"));
  };
  transform::set_pca_factories(m, transform::AllocRule::Dp, true);
  return m;
}

}  // namespace vq

// `uniform`: the fixed-uniform baseline of the kvtc benchmark. The same PCA, quantizer, chunking
// and entropy coding as kvtc, but divmod(bit_budget, r) bits per component: q = budget / r bits
// each and q + 1 for the first budget % r (widths capped at 8).
#include "transform/method_common.hpp"

namespace vq {

MethodInfo uniform_method_info() {
  MethodInfo m;
  m.id = "uniform";
  m.description = "kvtc's PCA pipeline with divmod(bit_budget, r) bits per component (baseline)";
  m.options = transform::pca_common_options();
  transform::set_pca_factories(m, transform::AllocRule::Uniform, false);
  return m;
}

}  // namespace vq

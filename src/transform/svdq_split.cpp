// `svdq_split`: SVDq's fixed two-tier split as a baseline at kvtc's budget. The same PCA pipeline
// as kvtc, but the top 25% of components (at least one) get hi = 2 * lo bits and the rest lo, with
// the largest lo that fits bit_budget (hi capped at 8). Not the original keys-only SVDq schedule.
#include "transform/method_common.hpp"

namespace vq {

MethodInfo svdq_split_method_info() {
  MethodInfo m;
  m.id = "svdq_split";
  m.description = "kvtc's PCA pipeline with SVDq's fixed split: top 25% at 2*lo bits, rest lo";
  m.options = transform::pca_common_options();
  transform::set_pca_factories(m, transform::AllocRule::Split, false);
  return m;
}

}  // namespace vq

// `spectralquant`: a binary signal/noise split of the PCA spectrum. Per (batch, head) and K/V
// independently: kvtc's PCA fitted once on the first fit_tokens tokens and frozen; with the
// participation ratio PR = (sum v)^2 / sum v^2 of the component variances, the top round(PR)
// components (clamped to [1, r]) are "signal" and get signal_bits, the rest noise_bits
// (0 drops them). Bytes counted as for kvtc (docs/methods.md).
#include <memory>

#include "core/options.hpp"
#include "transform/family_coders.hpp"

namespace vq {

MethodInfo spectralquant_method_info() {
  MethodInfo m;
  m.id = "spectralquant";
  m.description =
      "PCA components split at round(participation ratio): signal and noise halves, "
      "uniform bits within each";
  m.options = transform::chunk_options();
  m.options.push_back(opt_int("signal_bits", 4, 1, 8, "bits of each signal component"));
  m.options.push_back(opt_int("noise_bits", 2, 0, 8,
                              "bits of each noise component (0 = drop the noise components)"));
  transform::set_family_factories(m, [](const CacheConfig& c, int64_t) {
    const int sig = static_cast<int>(c.get_int("signal_bits"));
    const int noise = static_cast<int>(c.get_int("noise_bits"));
    return transform::KvCoderFactory(
        [sig, noise](int64_t w, int) -> std::unique_ptr<transform::RowCoder> {
          return std::make_unique<transform::FixedRulePcaCoder>(
              w, [sig, noise](const std::vector<double>& v, int64_t) {
                return transform::spectral_bits(v, sig, noise);
              });
        });
  });
  return m;
}

}  // namespace vq

// `palu`: Palu-style low-rank latents for keys and values. Per (batch, head) and K/V
// independently: kvtc's PCA fitted once on the first fit_tokens tokens and frozen; the first
// `rank` components are kept (0 = all of them, full rank), the top 25% of the kept ones
// (at least one) at hi_bits and the rest at lo_bits; components past the rank are dropped.
// Bytes counted as for kvtc (docs/methods.md).
#include <memory>

#include "core/options.hpp"
#include "transform/family_coders.hpp"

namespace vq {

MethodInfo palu_method_info() {
  MethodInfo m;
  m.id = "palu";
  m.description = "low-rank PCA latents for K and V: top 25% of components at 4 bits, rest at 2";
  m.options = transform::chunk_options();
  m.options.push_back(
      opt_int("rank", 0, 0, 65536, "latent components kept per head (0 = all, full rank)"));
  m.options.push_back(opt_int("hi_bits", 4, 1, 8, "bits of the top 25% of kept components"));
  m.options.push_back(opt_int("lo_bits", 2, 1, 8, "bits of the other kept components"));
  transform::set_family_factories(m, [](const CacheConfig& c, int64_t) {
    const int64_t rank = c.get_int("rank");
    const int hi = static_cast<int>(c.get_int("hi_bits"));
    const int lo = static_cast<int>(c.get_int("lo_bits"));
    return transform::KvCoderFactory(
        [rank, hi, lo](int64_t w, int) -> std::unique_ptr<transform::RowCoder> {
          return std::make_unique<transform::FixedRulePcaCoder>(
              w, [rank, hi, lo](const std::vector<double>& v, int64_t) {
                return transform::palu_bits(static_cast<int64_t>(v.size()), rank, hi, lo);
              });
        });
  });
  return m;
}

}  // namespace vq

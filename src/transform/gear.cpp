// `gear`: GEAR-style compression. Per (batch, head) and K/V independently, each chunk of
// chunk_tokens tokens: the `outlier_ratio` fraction of largest-magnitude entries is kept as sparse
// fp16 outliers, the remaining dense part is quantized per token at `bits` bits (affine min/max),
// and the quantization residual is approximated by its best rank-`rank` factorization (truncated
// SVD, factors stored at fp16). As in kvtc, the first fit_tokens tokens are encoded at once and
// later tokens wait raw at fp16 (counted) until a chunk fills.
#include <memory>

#include "core/options.hpp"
#include "transform/family_coders.hpp"

namespace vq {

MethodInfo gear_method_info() {
  MethodInfo m;
  m.id = "gear";
  m.description = "per-token low-bit quantization + low-rank residual + sparse fp16 outliers";
  m.options = transform::chunk_options();
  m.options.push_back(opt_int("bits", 2, 1, 8, "bits of the dense quantization"));
  m.options.push_back(
      opt_int("rank", 4, 0, 65536, "rank of the residual approximation per chunk (0 = none)"));
  m.options.push_back(opt_float("outlier_ratio", "0.01", 0.0, 1.0,
                                "fraction of each chunk's entries kept as fp16 outliers"));
  transform::set_family_factories(m, [](const CacheConfig& c, int64_t) {
    const int bits = static_cast<int>(c.get_int("bits"));
    const int64_t rank = c.get_int("rank");
    const double ratio = c.get_float("outlier_ratio");
    return transform::KvCoderFactory(
        [bits, rank, ratio](int64_t w, int) -> std::unique_ptr<transform::RowCoder> {
          return std::make_unique<transform::GearRowCoder>(w, bits, rank, ratio);
        });
  });
  return m;
}

}  // namespace vq

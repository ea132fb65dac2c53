#include "coding/distortion_fit.hpp"

#include <cmath>

#include "coding/quantizer.hpp"
#include "core/rng.hpp"
#include "veloxquant/errors.hpp"

namespace vq::coding {

DistortionFit fit_distortion_curve(const std::vector<int>& bits, int64_t block_size, int64_t trials,
                                   uint64_t seed) {
  VQ_CHECK(block_size >= 2 && trials >= 1, InvalidArgument,
           "fit_distortion_curve: block_size = ", block_size, " must be >= 2 and trials = ", trials,
           " >= 1");
  VQ_CHECK(bits.size() >= 2, InvalidArgument,
           "fit_distortion_curve: needs at least two bit widths, got ", bits.size());
  for (int b : bits)
    VQ_CHECK(b >= 1 && b <= kMaxQuantBits, InvalidArgument, "fit_distortion_curve: width ", b,
             " is out of range; allowed [1, ", kMaxQuantBits, "]");
  DistortionFit fit;
  fit.bits = bits;
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(block_size));
  std::vector<double> sum(bits.size(), 0.0);
  for (int64_t t = 0; t < trials; ++t) {
    for (auto& v : x) v = static_cast<float>(rng.normal());
    for (size_t k = 0; k < bits.size(); ++k) sum[k] += affine_mse(x.data(), block_size, bits[k]);
  }
  // Least squares of y = a + s * b with y = log MSE: beta = exp(-s), alpha = exp(a).
  double sb = 0, sy = 0, sbb = 0, sby = 0;
  const double m = static_cast<double>(bits.size());
  for (size_t k = 0; k < bits.size(); ++k) {
    const double mse = sum[k] / static_cast<double>(trials);
    fit.measured_mse.push_back(mse);
    const double b = bits[k], y = std::log(mse);
    sb += b;
    sy += y;
    sbb += b * b;
    sby += b * y;
  }
  const double denom = m * sbb - sb * sb;
  VQ_CHECK(denom > 0, InvalidArgument, "fit_distortion_curve: bit widths must not all be equal");
  const double slope = (m * sby - sb * sy) / denom;
  const double icept = (sy - slope * sb) / m;
  fit.beta = std::exp(-slope);
  fit.alpha = std::exp(icept);
  for (int b : bits) fit.fitted_mse.push_back(fit.alpha * std::pow(fit.beta, -b));
  return fit;
}

}  // namespace vq::coding

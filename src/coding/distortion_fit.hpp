// Where the DP's default beta comes from: the measured distortion curve of our affine min/max
// quantizer on Gaussian data, fitted as MSE(b) ~= alpha * beta^(-b) (least squares on log MSE).
#pragma once

#include <cstdint>
#include <vector>

namespace vq::coding {

struct DistortionFit {
  double alpha = 0;
  double beta = 0;
  std::vector<int> bits;             ///< the bit widths measured
  std::vector<double> measured_mse;  ///< per width, MSE of N(0, 1) data (so relative to variance)
  std::vector<double> fitted_mse;    ///< alpha * beta^(-b) per width
};

/// Quantize `trials` blocks of `block_size` N(0, 1) samples (vq::Rng from `seed`) at each width in
/// `bits` (1..8, each block with its own min/max, as one KVTC chunk component would be), measure
/// the mean MSE per width, and fit alpha, beta by least squares on log(MSE) = log(alpha) - b
/// log(beta). Needs at least two distinct widths.
DistortionFit fit_distortion_curve(const std::vector<int>& bits = {1, 2, 3, 4, 5, 6, 7, 8},
                                   int64_t block_size = 128, int64_t trials = 64,
                                   uint64_t seed = 0);

}  // namespace vq::coding

// Energy-weighted leverage scores of a weighted-value block W [n, D]:
//   l_i = sum_{j < r} (s_j^2 / sum_all s^2) * U_ij^2,   r = min(rank_cap, n, D)
// where W = U diag(s) V^T. Equivalently l_i = sum_{j<r} (W v_j)_i^2 / ||W||_F^2.
// The scores are in [0, 1] and sum to the share of energy in the top r directions (1 when
// r = min(n, D)). An all-zero block gives all-zero scores.
#pragma once

#include <cstdint>

namespace vq::eviction {

/// Oracle: thin SVD of W with Eigen's BDCSVD, in double. W row-major [n, D]; out[n].
void leverage_reference(const double* W, int64_t n, int64_t D, int64_t rank_cap, double* out);

/// Same quantity without an SVD: closed form ||w_i||^2 / ||W||_F^2 when r = min(n, D), otherwise
/// the smaller Gram matrix (n x n or D x D) with a symmetric eigensolver.
/// Agrees with leverage_reference to ~1e-10 absolute (scores are in [0, 1]).
void leverage_fast(const double* W, int64_t n, int64_t D, int64_t rank_cap, double* out);

}  // namespace vq::eviction

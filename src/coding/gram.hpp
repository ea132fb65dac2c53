// The Gram matrix of a block of rows, the inner loop of every PCA fit's covariance
// (transform/pca_coder.cpp):
//
//   G[i, j] = sum_{t < n} X[t, i] X[t, j]        j <= i < D  (the lower triangle)
//
// Each entry starts at 0 and sums over t in order with one multiply-add per term (fused when
// the target has FMA), so the result does not depend on how the work is blocked.
//
//   gram_lower_ref  plain scalar loops, the yardstick.
//   gram_lower      register-blocked kernel (8 rows x 32 columns in 512-bit registers where the
//                   target has AVX-512F, 6 x 16 in 256-bit ones with AVX2/FMA; rows in panels of
//                   64 so that a panel stays in L1 while every block passes): equal to the
//                   reference bit for bit. Entries above the diagonal are left unspecified.
#pragma once

#include <cstdint>

namespace vq::coding {

/// X: [n, D] row-major; G: [D, D] row-major, lower triangle (diagonal included) written.
void gram_lower_ref(const float* X, int64_t n, int64_t D, float* G);
void gram_lower(const float* X, int64_t n, int64_t D, float* G);

}  // namespace vq::coding

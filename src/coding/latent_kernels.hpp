// Un-projection of a chunk of PCA latents back to rows: the inner loop of every PCA codec's
// decoder (kvtc, uniform, svdq_split, palu, spectralquant, svdq's keys); and the projection of
// rows onto the basis, the encoders' inner loop, on the same kernel.
//
//   out[t, d] = mean[d] + sum_{j < k} lat[j, t] * basis[j, d]      t < n, d < D
//
// The sum starts at 0 and runs over j in order with one multiply-add per term (fused when the
// target has FMA), and the mean is added last; the resident row codec (codecs/pca_codec.cpp)
// sums a row in the same order, so both forms decode to the same floats.
//
//   unproject_rows_ref  plain scalar loops, the yardstick.
//   unproject_rows      register-blocked AVX2/FMA kernel (6 rows x 16 columns of accumulators,
//                       or 6 x 32 in 512-bit registers where the target has AVX-512F; each
//                       element still summed by its own accumulator in j order): equal to the
//                       reference bit for bit. Falls back to the reference without AVX2/FMA.
#pragma once

#include <cmath>
#include <cstdint>

namespace vq::coding {

/// One multiply-add, fused when the target has FMA (what the vector kernels do per lane).
inline float madd(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

/// lat: [k, n] row-major (component-major); basis: [k, D] row-major; mean: [D]; out: [n, D].
/// k may be 0 (every row is the mean).
void unproject_rows_ref(const float* lat, int64_t k, int64_t n, const float* basis,
                        const float* mean, int64_t D, float* out);
void unproject_rows(const float* lat, int64_t k, int64_t n, const float* basis, const float* mean,
                    int64_t D, float* out);

/// The forward map, on the same blocked kernel: latT[t, j] = 0 + sum_{d < D} rows[t, d] *
/// basisT[d, j], multiply-adds in d order from +0 (so a row's latents depend on that row and the
/// basis only). rows: [n, D] row-major; basisT: [D, k] (the basis transposed); latT: [n, k].
void project_rows_ref(const float* rows, int64_t n, int64_t D, const float* basisT, int64_t k,
                      float* latT);
void project_rows(const float* rows, int64_t n, int64_t D, const float* basisT, int64_t k,
                  float* latT);

}  // namespace vq::coding

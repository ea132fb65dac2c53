#include "coding/latent_kernels.hpp"

#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VQ_LATENT_AVX2 1
#endif

namespace vq::coding {

void unproject_rows_ref(const float* lat, int64_t k, int64_t n, const float* basis,
                        const float* mean, int64_t D, float* out) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) acc = madd(lat[j * n + t], basis[j * D + d], acc);
      out[t * D + d] = mean[d] + acc;
    }
}

#if VQ_LATENT_AVX2

namespace {

// R rows x 16 columns (d0 .. d0 + 15): 2R accumulators, each summed over j in order with one
// fused multiply-add per term, then the mean added. Row r's latent for component j is
// l[j * lstride + r] (lstride = n on the [k, n] latents, R on a packed panel). The loops over r
// are unrolled by pragma: without it GCC keeps the accumulator arrays in memory as well and
// stores them on every iteration, which halves the speed.
template <int R>
inline void block16(const float* l, int64_t lstride, int64_t k, const float* basis,
                    const float* mean, int64_t D, float* out, int64_t d0) {
  __m256 a0[R], a1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
  const float* b = basis + d0;
  for (int64_t j = 0; j < k; ++j, l += lstride, b += D) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(l + r);
      a0[r] = _mm256_fmadd_ps(x, b0, a0[r]);
      a1[r] = _mm256_fmadd_ps(x, b1, a1[r]);
    }
  }
  const __m256 m0 = _mm256_loadu_ps(mean + d0);
  const __m256 m1 = _mm256_loadu_ps(mean + d0 + 8);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(out + r * D + d0, _mm256_add_ps(m0, a0[r]));
    _mm256_storeu_ps(out + r * D + d0 + 8, _mm256_add_ps(m1, a1[r]));
  }
}

// The same for 8 columns (d0 .. d0 + 7).
template <int R>
inline void block8(const float* l, int64_t lstride, int64_t k, const float* basis,
                   const float* mean, int64_t D, float* out, int64_t d0) {
  __m256 a0[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) a0[r] = _mm256_setzero_ps();
  const float* b = basis + d0;
  for (int64_t j = 0; j < k; ++j, l += lstride, b += D) {
    const __m256 b0 = _mm256_loadu_ps(b);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) a0[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(l + r), b0, a0[r]);
  }
  const __m256 m0 = _mm256_loadu_ps(mean + d0);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * D + d0, _mm256_add_ps(m0, a0[r]));
}

template <int R, int V>
inline void block(const float* l, int64_t lstride, int64_t k, const float* basis, const float* mean,
                  int64_t D, float* out, int64_t d0) {
  if constexpr (V == 2)
    block16<R>(l, lstride, k, basis, mean, D, out, d0);
  else
    block8<R>(l, lstride, k, basis, mean, D, out, d0);
}

constexpr int kRows = 6;  // rows per block: 6 x 2 accumulators + 2 basis + 1 broadcast registers

// One column panel of V vectors over every row: the full blocks from the packed
// panels, the last n % kRows rows from the [k, n] latents.
template <int V>
void panel(const float* lat, const float* packed, int64_t k, int64_t n, const float* basis,
           const float* mean, int64_t D, float* out, int64_t d0) {
  const int64_t blocks = n / kRows;
  for (int64_t bl = 0; bl < blocks; ++bl)
    block<kRows, V>(packed + bl * k * kRows, kRows, k, basis, mean, D, out + bl * kRows * D, d0);
  const int64_t t = blocks * kRows;
  const float* l = lat + t;
  float* o = out + t * D;
  switch (n - t) {
    case 5:
      return block<5, V>(l, n, k, basis, mean, D, o, d0);
    case 4:
      return block<4, V>(l, n, k, basis, mean, D, o, d0);
    case 3:
      return block<3, V>(l, n, k, basis, mean, D, o, d0);
    case 2:
      return block<2, V>(l, n, k, basis, mean, D, o, d0);
    case 1:
      return block<1, V>(l, n, k, basis, mean, D, o, d0);
    default:
      return;
  }
}

}  // namespace

void unproject_rows(const float* lat, int64_t k, int64_t n, const float* basis, const float* mean,
                    int64_t D, float* out) {
  // The full row blocks' latents packed block by block ([block][j][kRows]), so
  // that a block's broadcasts read one contiguous run instead of k strided
  // cache lines.
  const int64_t blocks = n / kRows;
  thread_local std::vector<float> packed;
  packed.resize(static_cast<size_t>(blocks * k * kRows));
  for (int64_t j = 0; j < k; ++j)
    for (int64_t bl = 0; bl < blocks; ++bl)
      for (int r = 0; r < kRows; ++r)
        packed[static_cast<size_t>((bl * k + j) * kRows + r)] = lat[j * n + bl * kRows + r];
  // Column panels outermost: a 16-column panel of the basis (k x 64 bytes)
  // stays in L1 while every row block of the chunk streams past it.
  int64_t d0 = 0;
  for (; d0 + 16 <= D; d0 += 16) panel<2>(lat, packed.data(), k, n, basis, mean, D, out, d0);
  for (; d0 + 8 <= D; d0 += 8) panel<1>(lat, packed.data(), k, n, basis, mean, D, out, d0);
  // Last D % 8 columns: the scalar loop (same order, same fused multiply-add).
  for (int64_t t = 0; t < n && d0 < D; ++t)
    for (int64_t d = d0; d < D; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) acc = madd(lat[j * n + t], basis[j * D + d], acc);
      out[t * D + d] = mean[d] + acc;
    }
}

#else

void unproject_rows(const float* lat, int64_t k, int64_t n, const float* basis, const float* mean,
                    int64_t D, float* out) {
  unproject_rows_ref(lat, k, n, basis, mean, D, out);
}

#endif

}  // namespace vq::coding

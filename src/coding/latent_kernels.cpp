#include "coding/latent_kernels.hpp"

#include <algorithm>
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

void project_rows_ref(const float* rows, int64_t n, int64_t D, const float* basisT, int64_t k,
                      float* latT) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      float acc = 0.0f;
      for (int64_t d = 0; d < D; ++d) acc = madd(rows[t * D + d], basisT[d * k + j], acc);
      latT[t * k + j] = 0.0f + acc;
    }
}

#if VQ_LATENT_AVX2

namespace {

// R rows x 16 columns (d0 .. d0 + 15): 2R accumulators, each summed over j in order with one
// fused multiply-add per term, then the mean added. Row r's latent for component j is
// l[j * lstride + r] (lstride = n on the [k, n] latents, R on a packed panel). The loops over r
// are unrolled by pragma: without it GCC keeps the accumulator arrays in memory as well and
// stores them on every iteration, which halves the speed.
template <int R, bool S>
inline void block16(const float* l, int64_t lstride, int64_t rs, int64_t k, const float* basis,
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
      const __m256 x = _mm256_broadcast_ss(l + (S ? r * rs : r));
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
template <int R, bool S>
inline void block8(const float* l, int64_t lstride, int64_t rs, int64_t k, const float* basis,
                   const float* mean, int64_t D, float* out, int64_t d0) {
  __m256 a0[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) a0[r] = _mm256_setzero_ps();
  const float* b = basis + d0;
  for (int64_t j = 0; j < k; ++j, l += lstride, b += D) {
    const __m256 b0 = _mm256_loadu_ps(b);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      a0[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(l + (S ? r * rs : r)), b0, a0[r]);
  }
  const __m256 m0 = _mm256_loadu_ps(mean + d0);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * D + d0, _mm256_add_ps(m0, a0[r]));
}

// The same for the last w < 8 columns (d0 .. d0 + w - 1), through masked loads and stores: the
// lanes past the edge are neither read nor written.
template <int R, bool S>
inline void block_tail(const float* l, int64_t lstride, int64_t rs, int64_t k, const float* basis,
                       const float* mean, int64_t D, float* out, int64_t d0, int64_t w) {
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(w)),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256 a0[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) a0[r] = _mm256_setzero_ps();
  const float* b = basis + d0;
  for (int64_t j = 0; j < k; ++j, l += lstride, b += D) {
    const __m256 b0 = _mm256_maskload_ps(b, mask);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      a0[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(l + (S ? r * rs : r)), b0, a0[r]);
  }
  const __m256 m0 = _mm256_maskload_ps(mean + d0, mask);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) _mm256_maskstore_ps(out + r * D + d0, mask, _mm256_add_ps(m0, a0[r]));
}

#if defined(__AVX512F__)
// The same with 512-bit registers: R rows x 32 columns, then R rows x 16. Each element is still
// one accumulator summed over j in order with one fused multiply-add per term, so the floats are
// those of the 256-bit blocks and of the reference. Where the core executes 512-bit FMAs at full
// width this doubles the multiply-adds per instruction (measured on this project's 2-core AMD
// EPYC: 6 x 32 blocks 104-106 GFMA/s against 55 for 6 x 16 blocks of 256 bits).
template <int R, bool S>
inline void block32(const float* l, int64_t lstride, int64_t rs, int64_t k, const float* basis,
                    const float* mean, int64_t D, float* out, int64_t d0) {
  __m512 a0[R], a1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
  const float* b = basis + d0;
  for (int64_t j = 0; j < k; ++j, l += lstride, b += D) {
    const __m512 b0 = _mm512_loadu_ps(b);
    const __m512 b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(l[S ? r * rs : r]);
      a0[r] = _mm512_fmadd_ps(x, b0, a0[r]);
      a1[r] = _mm512_fmadd_ps(x, b1, a1[r]);
    }
  }
  const __m512 m0 = _mm512_loadu_ps(mean + d0);
  const __m512 m1 = _mm512_loadu_ps(mean + d0 + 16);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(out + r * D + d0, _mm512_add_ps(m0, a0[r]));
    _mm512_storeu_ps(out + r * D + d0 + 16, _mm512_add_ps(m1, a1[r]));
  }
}

template <int R, bool S>
inline void block16z(const float* l, int64_t lstride, int64_t rs, int64_t k, const float* basis,
                     const float* mean, int64_t D, float* out, int64_t d0) {
  __m512 a0[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) a0[r] = _mm512_setzero_ps();
  const float* b = basis + d0;
  for (int64_t j = 0; j < k; ++j, l += lstride, b += D) {
    const __m512 b0 = _mm512_loadu_ps(b);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      a0[r] = _mm512_fmadd_ps(_mm512_set1_ps(l[S ? r * rs : r]), b0, a0[r]);
  }
  const __m512 m0 = _mm512_loadu_ps(mean + d0);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * D + d0, _mm512_add_ps(m0, a0[r]));
}
#endif

#if defined(__AVX512F__)
// rows per block: 8 x 2 accumulators + 2 basis + 1 broadcast of the 32 registers (and a chunk of
// 128 rows has no tail); measured 106 GFMA/s against 104 at 6 rows.
constexpr int kRows = 8;
#else
constexpr int kRows = 6;  // rows per block: 6 x 2 accumulators + 2 basis + 1 broadcast registers
#endif

// R rows (latents l[j * lstride + r], or l[j * lstride + r * rs] when S) across every 32-, 16-
// and 8-column panel, then the last D % 8 columns masked.
template <int R, bool S>
void rows(const float* l, int64_t lstride, int64_t rs, int64_t k, const float* basis,
          const float* mean, int64_t D, float* out) {
  int64_t d0 = 0;
#if defined(__AVX512F__)
  for (; d0 + 32 <= D; d0 += 32) block32<R, S>(l, lstride, rs, k, basis, mean, D, out, d0);
  for (; d0 + 16 <= D; d0 += 16) block16z<R, S>(l, lstride, rs, k, basis, mean, D, out, d0);
#endif
  for (; d0 + 16 <= D; d0 += 16) block16<R, S>(l, lstride, rs, k, basis, mean, D, out, d0);
  for (; d0 + 8 <= D; d0 += 8) block8<R, S>(l, lstride, rs, k, basis, mean, D, out, d0);
  if (d0 < D) block_tail<R, S>(l, lstride, rs, k, basis, mean, D, out, d0, D - d0);
}

// rows<m> for the last 0 <= m < kRows rows of the chunk (m known at run time).
template <bool S, int R = kRows - 1>
void tail_rows(int64_t m, const float* l, int64_t lstride, int64_t rs, int64_t k,
               const float* basis, const float* mean, int64_t D, float* out) {
  if constexpr (R >= 1) {
    if (m == R) return rows<R, S>(l, lstride, rs, k, basis, mean, D, out);
    tail_rows<S, R - 1>(m, l, lstride, rs, k, basis, mean, D, out);
  }
}

}  // namespace

void unproject_rows(const float* lat, int64_t k, int64_t n, const float* basis, const float* mean,
                    int64_t D, float* out) {
  // Row blocks outermost, each block's latents first packed ([j][kRows]) so that its broadcasts
  // read one contiguous run instead of k strided cache lines; the basis streams past from L2.
  if (n <= 0) return;
  if (k == 0) {  // no components (lat and basis may be null): the mean, as the reference adds it
    for (int64_t t = 0; t < n; ++t)
      for (int64_t d = 0; d < D; ++d) out[t * D + d] = mean[d] + 0.0f;
    return;
  }
  std::vector<float> packed(static_cast<size_t>(k * kRows));
  int64_t t = 0;
  for (; t + kRows <= n; t += kRows) {
    for (int64_t j = 0; j < k; ++j)
      for (int r = 0; r < kRows; ++r)
        packed[static_cast<size_t>(j * kRows + r)] = lat[j * n + t + r];
    rows<kRows, false>(packed.data(), kRows, 1, k, basis, mean, D, out + t * D);
  }
  tail_rows<false>(n - t, lat + t, n, 1, k, basis, mean, D, out + t * D);
}

void project_rows(const float* rows_in, int64_t n, int64_t D, const float* basisT, int64_t k,
                  float* latT) {
  // The un-projection kernel with the rows' D values as its "latents" (read in place: row r's
  // value d at rows_in[r * D + d], a broadcast per row and step) and the transposed basis [D, k]
  // as the rows it combines; the "mean" is zero.
  if (n <= 0 || k <= 0) return;
  const std::vector<float> zeros(static_cast<size_t>(k), 0.0f);
  int64_t t = 0;
  for (; t + kRows <= n; t += kRows)
    rows<kRows, true>(rows_in + t * D, 1, D, D, basisT, zeros.data(), k, latT + t * k);
  tail_rows<true>(n - t, rows_in + t * D, 1, D, D, basisT, zeros.data(), k, latT + t * k);
}

#else

void unproject_rows(const float* lat, int64_t k, int64_t n, const float* basis, const float* mean,
                    int64_t D, float* out) {
  unproject_rows_ref(lat, k, n, basis, mean, D, out);
}

void project_rows(const float* rows, int64_t n, int64_t D, const float* basisT, int64_t k,
                  float* latT) {
  project_rows_ref(rows, n, D, basisT, k, latT);
}

#endif

}  // namespace vq::coding

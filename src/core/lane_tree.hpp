// Sums of 16 rows' 16-lane partial sums at once, for the AVX-512 attention kernels (the fp16/bf16
// rows in src/store/row_kernels.cpp, the q8_0 blocks in src/coding/ggml_dot.cpp).
//
// Each row's 16 lanes are added in one fixed tree: (l, l + 8), then (l, l + 4), (l, l + 2),
// (l, l + 1) -- the tree a 256-bit horizontal sum of (lo + hi) follows. Every add combines two
// values of the same row and the shuffles only move whole rows' lanes next to each other, so a
// row's sum has the same bits whichever rows share the registers with it (zero rows included).
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

#include <cstdint>

namespace vq::simd {

/// Levels 1-2 of four rows' lanes: 128-bit quarter i of the result holds row i's four
/// (l, l + 4) sums.
inline __m512 reduce_rows4(__m512 t0, __m512 t1, __m512 t2, __m512 t3) {
  // level 1: quarters 0-1 hold the first row's eight (l, l + 8) sums, quarters 2-3 the second's
  const __m512 w0 =
      _mm512_add_ps(_mm512_shuffle_f32x4(t0, t1, 0x44), _mm512_shuffle_f32x4(t0, t1, 0xEE));
  const __m512 w1 =
      _mm512_add_ps(_mm512_shuffle_f32x4(t2, t3, 0x44), _mm512_shuffle_f32x4(t2, t3, 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xDD));
}

/// Levels 3-4 of four reduce_rows4 results (rows 4m .. 4m + 3 in y_m): lane r of the result is
/// row r's sum.
inline __m512 reduce_rows16(__m512 y0, __m512 y1, __m512 y2, __m512 y3) {
  // level 3: quarter i holds rows i (elements 0-1) and i + 4 (2-3) in z0, i + 8 and i + 12 in z1
  const __m512 z0 = _mm512_add_ps(_mm512_shuffle_ps(y0, y1, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(y0, y1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 z1 = _mm512_add_ps(_mm512_shuffle_ps(y2, y3, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(y2, y3, _MM_SHUFFLE(3, 2, 3, 2)));
  // level 4: element j of quarter i is row i + 4 j; then the rows in order
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(z0, z1, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(z0, z1, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_permutexvar_ps(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), s);
}

/// The sums of rows [0, 16) at rows + r * stride for NQ queries: lanes(row, t) fills t[NQ] with a
/// row's 16-lane partial sums; query j's 16 results go to out + j * out_stride.
template <int NQ, typename Lanes>
[[gnu::always_inline]] inline void sum_rows16(const Lanes& lanes, const uint8_t* rows,
                                              int64_t stride, float* out, int64_t out_stride) {
  __m512 y[4][NQ];
  for (int g = 0; g < 4; ++g) {
    const uint8_t* r = rows + 4 * g * stride;
    __m512 t0[NQ], t1[NQ], t2[NQ], t3[NQ];
    lanes(r, t0);
    lanes(r + stride, t1);
    lanes(r + 2 * stride, t2);
    lanes(r + 3 * stride, t3);
    for (int j = 0; j < NQ; ++j) y[g][j] = reduce_rows4(t0[j], t1[j], t2[j], t3[j]);
  }
  for (int j = 0; j < NQ; ++j)
    _mm512_storeu_ps(out + j * out_stride, reduce_rows16(y[0][j], y[1][j], y[2][j], y[3][j]));
}

}  // namespace vq::simd
#endif

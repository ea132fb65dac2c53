#include "store/row_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/lane_tree.hpp"
#include "core/static_count.hpp"
#include "veloxquant/tensor.hpp"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define VQ_ROWS_AVX2 1
#include <immintrin.h>
#endif

namespace vq::store {

namespace {

template <FloatRows T>
constexpr int64_t value_bytes() {
  return T == FloatRows::F32 ? 4 : 2;
}

// Value d of a stored row, widened to fp32.
template <FloatRows T>
inline float load1(const uint8_t* row, int64_t d) {
  if constexpr (T == FloatRows::F32) {
    float x;
    std::memcpy(&x, row + 4 * d, 4);
    return x;
  } else {
    uint16_t h;
    std::memcpy(&h, row + 2 * d, 2);
    if constexpr (T == FloatRows::F16) {
      return fp16_to_fp32(h);
    } else {
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      float x;
      std::memcpy(&x, &bits, 4);
      return x;
    }
  }
}

template <FloatRows T>
void dot_ref(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* q,
             float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* r = rows + i * stride;
    float s = 0.0f;
    for (int64_t d = 0; d < D; ++d) s += load1<T>(r, d) * q[d];
    out[i] = s;
  }
}

template <FloatRows T>
void axpy_ref(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* w,
              float* acc) {
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* r = rows + i * stride;
    for (int64_t d = 0; d < D; ++d) acc[d] += w[i] * load1<T>(r, d);
  }
}

#if defined(VQ_ROWS_AVX2)

// Values d..d+7 of a stored row, widened to fp32 (unaligned loads).
template <FloatRows T>
inline __m256 load8(const uint8_t* row, int64_t d) {
  if constexpr (T == FloatRows::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row + 4 * d));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * d));
    if constexpr (T == FloatRows::F16)
      return _mm256_cvtph_ps(h);
    else
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

inline float hsum(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

#if defined(__AVX512F__)
// Values d..d+15 of a stored row, widened to fp32 (unaligned loads).
template <FloatRows T>
inline __m512 load16(const uint8_t* row, int64_t d) {
  if constexpr (T == FloatRows::F32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row + 4 * d));
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * d));
    // (the zero-masked forms with every lane selected: GCC 12's plain forms pass an undefined
    // source that -Wuninitialized reports once they are inlined into the group kernels)
    constexpr __mmask16 kAll = 0xFFFF;
    if constexpr (T == FloatRows::F16)
      return _mm512_maskz_cvtph_ps(kAll, h);
    else
      return _mm512_castsi512_ps(
          _mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16));
  }
}
#endif

// The dot product of one row with q, before the reduction across lanes: four lane-wise partial
// sums over the 8-value groups (group j into accumulator j % 4), added as (0 + 2) + (1 + 3): in
// the 512-bit loop's registers, accumulators (0, 1) and (2, 3) side by side, that is the sum of
// the two registers' halves, so dot_many_group32 can add the registers first and reduce 16 rows'
// 16 lanes together. With AVX-512
// the 32-value steps run on two 512-bit registers holding accumulators (0, 1) and (2, 3) side by
// side: each lane takes the same multiply-adds in the same order, so the bits are those of the
// 256-bit loop (which builds without AVX-512 use), with half the instructions.
template <FloatRows T>
inline __m256 dot_lanes(const uint8_t* r, const float* q, int64_t D8) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
         a3 = _mm256_setzero_ps();
  int64_t d = 0;
#if defined(__AVX512F__)
  if (D8 >= 32) {
    __m512 a01 = _mm512_setzero_ps(), a23 = _mm512_setzero_ps();
    for (; d + 32 <= D8; d += 32) {
      a01 = _mm512_fmadd_ps(load16<T>(r, d), _mm512_loadu_ps(q + d), a01);
      a23 = _mm512_fmadd_ps(load16<T>(r, d + 16), _mm512_loadu_ps(q + d + 16), a23);
    }
    a0 = _mm512_castps512_ps256(a01);
    a1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a01), 1));
    a2 = _mm512_castps512_ps256(a23);
    a3 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a23), 1));
  }
#else
  for (; d + 32 <= D8; d += 32) {
    a0 = _mm256_fmadd_ps(load8<T>(r, d), _mm256_loadu_ps(q + d), a0);
    a1 = _mm256_fmadd_ps(load8<T>(r, d + 8), _mm256_loadu_ps(q + d + 8), a1);
    a2 = _mm256_fmadd_ps(load8<T>(r, d + 16), _mm256_loadu_ps(q + d + 16), a2);
    a3 = _mm256_fmadd_ps(load8<T>(r, d + 24), _mm256_loadu_ps(q + d + 24), a3);
  }
#endif
  // at most three groups are left, for accumulators 0, 1, 2 in turn
  if (d < D8) {
    a0 = _mm256_fmadd_ps(load8<T>(r, d), _mm256_loadu_ps(q + d), a0);
    d += 8;
  }
  if (d < D8) {
    a1 = _mm256_fmadd_ps(load8<T>(r, d), _mm256_loadu_ps(q + d), a1);
    d += 8;
  }
  if (d < D8) a2 = _mm256_fmadd_ps(load8<T>(r, d), _mm256_loadu_ps(q + d), a2);
  return _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
}

// The D % 8 values past D8, added to s in order.
template <FloatRows T>
inline float dot_tail(float s, const uint8_t* r, const float* q, int64_t D8, int64_t D) {
  for (int64_t d = D8; d < D; ++d) s += load1<T>(r, d) * q[d];
  return s;
}

// hsum of eight rows' lanes at once: element k of the result is hsum(v[k]) to the bit, the same
// pairs added in the same grouping ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)), with the
// shuffles of one reduction shared by eight rows instead of a chain per row.
inline __m256 hsum8(const __m256 (&v)[8]) {
  __m256 x[4];  // x[p]: rows 2p (low half) and 2p + 1 (high half), lanes k = v_k + v_{k+4}
  for (int p = 0; p < 4; ++p)
    x[p] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x20),
                         _mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x31));
  // y[h]: per 128-bit half, (s0 + s2, s1 + s3) of two rows
  __m256 y[2];
  for (int h = 0; h < 2; ++h) {
    const __m256 lo = _mm256_shuffle_ps(x[2 * h], x[2 * h + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 hi = _mm256_shuffle_ps(x[2 * h], x[2 * h + 1], _MM_SHUFFLE(3, 2, 3, 2));
    y[h] = _mm256_add_ps(lo, hi);
  }
  const __m256 even = _mm256_shuffle_ps(y[0], y[1], _MM_SHUFFLE(2, 0, 2, 0));
  const __m256 odd = _mm256_shuffle_ps(y[0], y[1], _MM_SHUFFLE(3, 1, 3, 1));
  // rows 0 2 4 6 | 1 3 5 7 -> 0 .. 7
  return _mm256_permutevar8x32_ps(_mm256_add_ps(even, odd),
                                  _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Per row: dot_lanes, hsum, then the D % 8 tail in order: fixed by D. Rows eight at a time
// share one reduction (hsum8); the bits are those of one row at a time.
template <FloatRows T>
void dot_fast(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* q,
              float* out) {
  const int64_t D8 = D & ~int64_t{7};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v[8];
    for (int k = 0; k < 8; ++k) v[k] = dot_lanes<T>(rows + (i + k) * stride, q, D8);
    const __m256 s = hsum8(v);
    if (D8 == D) {
      _mm256_storeu_ps(out + i, s);
    } else {
      alignas(32) float part[8];
      _mm256_store_ps(part, s);
      for (int k = 0; k < 8; ++k)
        out[i + k] = dot_tail<T>(part[k], rows + (i + k) * stride, q, D8, D);
    }
  }
  for (; i < n; ++i) {
    const uint8_t* r = rows + i * stride;
    out[i] = dot_tail<T>(hsum(dot_lanes<T>(r, q, D8)), r, q, D8, D);
  }
}

// Rows four at a time: each 8-value slice of acc is loaded once, takes the four rows' terms in
// row order (one fused multiply-add each) and is stored back, so the result is the same as one
// row at a time.
template <FloatRows T>
void axpy_fast(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* w,
               float* acc) {
  const int64_t D8 = D & ~int64_t{7};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint8_t* r0 = rows + i * stride;
    const uint8_t* r1 = r0 + stride;
    const uint8_t* r2 = r1 + stride;
    const uint8_t* r3 = r2 + stride;
    const __m256 w0 = _mm256_set1_ps(w[i]), w1 = _mm256_set1_ps(w[i + 1]),
                 w2 = _mm256_set1_ps(w[i + 2]), w3 = _mm256_set1_ps(w[i + 3]);
    for (int64_t d = 0; d < D8; d += 8) {
      __m256 a = _mm256_loadu_ps(acc + d);
      a = _mm256_fmadd_ps(w0, load8<T>(r0, d), a);
      a = _mm256_fmadd_ps(w1, load8<T>(r1, d), a);
      a = _mm256_fmadd_ps(w2, load8<T>(r2, d), a);
      a = _mm256_fmadd_ps(w3, load8<T>(r3, d), a);
      _mm256_storeu_ps(acc + d, a);
    }
    for (int64_t d = D8; d < D; ++d) {
      float x = acc[d];
      x = std::fma(w[i], load1<T>(r0, d), x);
      x = std::fma(w[i + 1], load1<T>(r1, d), x);
      x = std::fma(w[i + 2], load1<T>(r2, d), x);
      x = std::fma(w[i + 3], load1<T>(r3, d), x);
      acc[d] = x;
    }
  }
  for (; i < n; ++i) {
    const uint8_t* r = rows + i * stride;
    const __m256 wi = _mm256_set1_ps(w[i]);
    for (int64_t d = 0; d < D8; d += 8)
      _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(wi, load8<T>(r, d), _mm256_loadu_ps(acc + d)));
    for (int64_t d = D8; d < D; ++d) acc[d] = std::fma(w[i], load1<T>(r, d), acc[d]);
  }
}

// dot_fast for NQ queries at once (query j at qs + j * D, result at out[j * out_stride + i]):
// each 8-value piece of a row is widened once and meets every query, each query keeping exactly
// dot_fast's accumulators and order, so its results are the bits dot_fast gives it alone.
template <FloatRows T, int NQ>
void dot_many_group(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* qs,
                    float* out, int64_t out_stride) {
  const int64_t D8 = D & ~int64_t{7};
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* r = rows + i * stride;
    __m256 a[NQ][4];
    for (auto& aq : a)
      for (auto& v : aq) v = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 32 <= D8; d += 32) {
      const __m256 x0 = load8<T>(r, d), x1 = load8<T>(r, d + 8), x2 = load8<T>(r, d + 16),
                   x3 = load8<T>(r, d + 24);
      for (int j = 0; j < NQ; ++j) {
        const float* q = qs + j * D + d;
        a[j][0] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(q), a[j][0]);
        a[j][1] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(q + 8), a[j][1]);
        a[j][2] = _mm256_fmadd_ps(x2, _mm256_loadu_ps(q + 16), a[j][2]);
        a[j][3] = _mm256_fmadd_ps(x3, _mm256_loadu_ps(q + 24), a[j][3]);
      }
    }
    for (int k = 0; d < D8; d += 8, ++k) {
      const __m256 x = load8<T>(r, d);
      for (int j = 0; j < NQ; ++j)
        a[j][k] = _mm256_fmadd_ps(x, _mm256_loadu_ps(qs + j * D + d), a[j][k]);
    }
    for (int j = 0; j < NQ; ++j) {
      float s =
          hsum(_mm256_add_ps(_mm256_add_ps(a[j][0], a[j][2]), _mm256_add_ps(a[j][1], a[j][3])));
      for (int64_t e = d; e < D; ++e) s += load1<T>(r, e) * qs[j * D + e];
      out[j * out_stride + i] = s;
    }
  }
}

#if defined(__AVX512F__)
// How far ahead of the rows being read the group kernels below ask for the next ones. A decode
// step at a long context reads every stored key and value once, from DRAM, in runs of up to
// one store page (64 KiB) that lie apart in memory; the hardware prefetcher restarts at every
// 4 KiB page boundary, so without requests the kernels waited on DRAM: on the 1B shape at
// context 4096 (Q8_0 weights, `full`), the key dots and value sums took 5.7 of a step's 32 ms,
// 134 MB at about 23 GB/s. With the requests 4 KiB ahead, one step in one process alternating
// off / on by rounds of 8 steps: 35.5 -> 37.2 tok/s (2 KiB 35.6 -> 37.1, 8 KiB 36.7 -> 38.6).
// Requests stop at the end of the run: past it lie other memory, whose lines the kernel would
// pull in for nothing. They change which lines are in cache, never a result.
constexpr int64_t kRowPrefetchAhead = 4096;

// Asks for the lines of the n bytes that start kRowPrefetchAhead past p, as far as they lie
// before `end` (the run's end, an address). Addresses are integers here: ahead of the run's last
// rows they would name memory outside it.
inline void prefetch_ahead_in_run(const uint8_t* p, int64_t n, uintptr_t end) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) + kRowPrefetchAhead;
  const uintptr_t stop = std::min(a + static_cast<uintptr_t>(n), end);
  // from the start of a's line, so that a span that does not start on a line boundary still has
  // its last line asked for
  for (uintptr_t x = a & ~uintptr_t{63}; x < stop; x += 64)
    _mm_prefetch(reinterpret_cast<const char*>(x), _MM_HINT_T0);
}

// dot_many_group for head dims that are a multiple of 32 (64, 128: every group of 8 values lands
// in dot_lanes' 512-bit loop), 16 rows at a time: a row's two 512-bit accumulators per query are
// dot_lanes' (the same multiply-adds), added into one register, and the 16 rows' registers of a
// query are reduced together (core/lane_tree.hpp: reduce_rows4 on every four rows, then
// reduce_rows16), which gives each row the bits hsum(dot_lanes) gives it. Per row and query that
// is one add and about three shuffles or adds of the shared reduction, where taking the halves
// apart and adding them cost five, plus hsum8's share. Rows left over go eight at a time through
// hsum8, then one at a time. DC > 0 is D known at compile time (0: D at run time).
// micro_codec GqaAttention/0/1 (4096 rows, D = 64, 4 queries, one thread): 33.4-33.9 µs before,
// 27.5-30.9 with this reduction, 16.3-16.8 with D compiled in as well.
template <FloatRows T, int NQ, int DC>
void dot_many_group32(const uint8_t* rows, int64_t stride, int64_t n, int64_t Drun, const float* qs,
                      float* out, int64_t out_stride) {
  const int64_t D = DC > 0 ? DC : Drun;
  const auto lanes16 = [&](const uint8_t* r, __m512(&t)[NQ]) {
    __m512 a01[NQ], a23[NQ];
    for (int j = 0; j < NQ; ++j) a01[j] = a23[j] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += 32) {
      const __m512 x0 = load16<T>(r, d), x1 = load16<T>(r, d + 16);
      for (int j = 0; j < NQ; ++j) {
        a01[j] = _mm512_fmadd_ps(x0, _mm512_loadu_ps(qs + j * D + d), a01[j]);
        a23[j] = _mm512_fmadd_ps(x1, _mm512_loadu_ps(qs + j * D + d + 16), a23[j]);
      }
    }
    for (int j = 0; j < NQ; ++j) t[j] = _mm512_add_ps(a01[j], a23[j]);
  };
  const auto lanes8 = [&](const uint8_t* r, __m256(&v)[NQ]) {  // level 1 of one row
    __m512 t[NQ];
    lanes16(r, t);
    for (int j = 0; j < NQ; ++j)
      v[j] = _mm256_add_ps(_mm512_castps512_ps256(t[j]),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t[j]), 1)));
  };
  int64_t i = 0;
  const uintptr_t end = reinterpret_cast<uintptr_t>(rows) + static_cast<uintptr_t>(n * stride);
  for (; i + 16 <= n; i += 16) {
    prefetch_ahead_in_run(rows + i * stride, 16 * stride, end);
    simd::sum_rows16<NQ>(lanes16, rows + i * stride, stride, out + i, out_stride);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 v[8][NQ];
    for (int k = 0; k < 8; ++k) lanes8(rows + (i + k) * stride, v[k]);
    for (int j = 0; j < NQ; ++j) {
      const __m256 per[8] = {v[0][j], v[1][j], v[2][j], v[3][j],
                             v[4][j], v[5][j], v[6][j], v[7][j]};
      _mm256_storeu_ps(out + j * out_stride + i, hsum8(per));
    }
  }
  for (; i < n; ++i) {
    __m256 v[NQ];
    lanes8(rows + i * stride, v);
    for (int j = 0; j < NQ; ++j) out[j * out_stride + i] = hsum(v[j]);
  }
}
#endif

template <FloatRows T>
void dot_many_fast(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* qs,
                   int64_t nq, float* out, int64_t out_stride) {
  // queries [j, j + NQ) through the widest group kernel for D
  const auto group = [&](auto nq_c, int64_t j) {
    constexpr int NQ = decltype(nq_c)::value;
#if defined(__AVX512F__)
    if (D % 32 == 0) {
      // the head dims models use compiled for: the loops over a row unroll and the queries stay
      // in registers (micro_codec GqaAttention/0/1 with the new reduction, D = 64: 27.5-30.9 ->
      // 16.3-16.8 µs; D = 128: 52.9-53.7 -> 31.6-34.0)
      return with_head_dim(D, [&](auto dc) {
        dot_many_group32<T, NQ, decltype(dc)::value>(rows, stride, n, D, qs + j * D,
                                                     out + j * out_stride, out_stride);
      });
    }
#endif
    dot_many_group<T, NQ>(rows, stride, n, D, qs + j * D, out + j * out_stride, out_stride);
  };
  for (int64_t j = 0; j < nq; j += 4) with_static_count<4>(nq - j, [&](auto c) { group(c, j); });
}

#if defined(__AVX512F__)
// axpy_many_fast for NW <= 4 weight rows and a head dim that is a multiple of 16, on 64 values of
// the accumulators at a time held in registers over all n rows (NW * 4 of them), each row widened
// once per 16 values and added into every accumulator: each value takes the multiply-adds
// axpy_fast gives it, one per row in row order, so the bits are the same, without axpy_many_fast's
// load and store of every accumulator slice per four rows.
template <FloatRows T, int NW, int G>
void axpy_many_span(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* w,
                    int64_t w_stride, float* acc) {  // values [0, 16 G) of each row
  __m512 a[NW][G];
  for (int j = 0; j < NW; ++j)
    for (int k = 0; k < G; ++k) a[j][k] = _mm512_loadu_ps(acc + j * D + 16 * k);
  constexpr int64_t kSpanBytes = 16 * G * (T == FloatRows::F32 ? 4 : 2);
  // the run ends with the last row's span
  const uintptr_t end = reinterpret_cast<uintptr_t>(rows) +
                        static_cast<uintptr_t>(std::max<int64_t>(0, n - 1) * stride + kSpanBytes);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* r = rows + i * stride;
    prefetch_ahead_in_run(r, kSpanBytes, end);
    __m512 x[G];
    for (int k = 0; k < G; ++k) x[k] = load16<T>(r, 16 * k);
    for (int j = 0; j < NW; ++j) {
      const __m512 wj = _mm512_set1_ps(w[j * w_stride + i]);
      for (int k = 0; k < G; ++k) a[j][k] = _mm512_fmadd_ps(wj, x[k], a[j][k]);
    }
  }
  for (int j = 0; j < NW; ++j)
    for (int k = 0; k < G; ++k) _mm512_storeu_ps(acc + j * D + 16 * k, a[j][k]);
}

template <FloatRows T, int NW>
void axpy_many_group16(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* w,
                       int64_t w_stride, float* acc) {
  constexpr int64_t kWidth = T == FloatRows::F32 ? 4 : 2;  // bytes per value
  for (int64_t d0 = 0; d0 < D; d0 += 64)
    with_static_count<4>(std::min<int64_t>(64, D - d0) / 16, [&](auto g) {
      axpy_many_span<T, NW, decltype(g)::value>(rows + d0 * kWidth, stride, n, D, w, w_stride,
                                                acc + d0);
    });
}
#endif

// axpy_fast for nw weight rows at once (weights j at w + j * w_stride, accumulator j at
// acc + j * D): each 8-value piece of four rows is widened once and added into every
// accumulator, which takes exactly axpy_fast's operations in its order (AVX-512 builds with a head
// dim that is a multiple of 16: axpy_many_group16 above).
template <FloatRows T>
void axpy_many_fast(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* w,
                    int64_t w_stride, int64_t nw, float* acc) {
#if defined(__AVX512F__)
  if (D % 16 == 0) {
    for (int64_t j = 0; j < nw; j += 4)
      with_static_count<4>(nw - j, [&](auto nw_c) {
        axpy_many_group16<T, decltype(nw_c)::value>(rows, stride, n, D, w + j * w_stride, w_stride,
                                                    acc + j * D);
      });
    return;
  }
#endif
  const int64_t D8 = D & ~int64_t{7};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint8_t* r0 = rows + i * stride;
    const uint8_t* r1 = r0 + stride;
    const uint8_t* r2 = r1 + stride;
    const uint8_t* r3 = r2 + stride;
    for (int64_t d = 0; d < D8; d += 8) {
      const __m256 x0 = load8<T>(r0, d), x1 = load8<T>(r1, d), x2 = load8<T>(r2, d),
                   x3 = load8<T>(r3, d);
      for (int64_t j = 0; j < nw; ++j) {
        const float* wj = w + j * w_stride + i;
        float* aj = acc + j * D + d;
        __m256 a = _mm256_loadu_ps(aj);
        a = _mm256_fmadd_ps(_mm256_set1_ps(wj[0]), x0, a);
        a = _mm256_fmadd_ps(_mm256_set1_ps(wj[1]), x1, a);
        a = _mm256_fmadd_ps(_mm256_set1_ps(wj[2]), x2, a);
        a = _mm256_fmadd_ps(_mm256_set1_ps(wj[3]), x3, a);
        _mm256_storeu_ps(aj, a);
      }
    }
    for (int64_t j = 0; j < nw; ++j) {
      const float* wj = w + j * w_stride + i;
      float* aj = acc + j * D;
      for (int64_t d = D8; d < D; ++d) {
        float x = aj[d];
        x = std::fma(wj[0], load1<T>(r0, d), x);
        x = std::fma(wj[1], load1<T>(r1, d), x);
        x = std::fma(wj[2], load1<T>(r2, d), x);
        x = std::fma(wj[3], load1<T>(r3, d), x);
        aj[d] = x;
      }
    }
  }
  for (; i < n; ++i) {
    const uint8_t* r = rows + i * stride;
    for (int64_t d = 0; d < D8; d += 8) {
      const __m256 x = load8<T>(r, d);
      for (int64_t j = 0; j < nw; ++j) {
        float* aj = acc + j * D + d;
        _mm256_storeu_ps(
            aj, _mm256_fmadd_ps(_mm256_set1_ps(w[j * w_stride + i]), x, _mm256_loadu_ps(aj)));
      }
    }
    for (int64_t j = 0; j < nw; ++j)
      for (int64_t d = D8; d < D; ++d)
        acc[j * D + d] = std::fma(w[j * w_stride + i], load1<T>(r, d), acc[j * D + d]);
  }
}

#endif

template <template <FloatRows> class K, typename... A>
void dispatch(FloatRows t, A... a) {
  switch (t) {
    case FloatRows::F32:
      K<FloatRows::F32>::run(a...);
      break;
    case FloatRows::F16:
      K<FloatRows::F16>::run(a...);
      break;
    case FloatRows::BF16:
      K<FloatRows::BF16>::run(a...);
      break;
  }
}

template <FloatRows T>
struct DotRef {
  static void run(const uint8_t* r, int64_t s, int64_t n, int64_t D, const float* q, float* o) {
    dot_ref<T>(r, s, n, D, q, o);
  }
};
template <FloatRows T>
struct AxpyRef {
  static void run(const uint8_t* r, int64_t s, int64_t n, int64_t D, const float* w, float* a) {
    axpy_ref<T>(r, s, n, D, w, a);
  }
};
#if defined(VQ_ROWS_AVX2)
template <FloatRows T>
struct DotFast {
  static void run(const uint8_t* r, int64_t s, int64_t n, int64_t D, const float* q, float* o) {
#if defined(__AVX512F__)
    // one query through the group kernel: the same bits (every row in hsum's tree), 16 rows
    // reduced together and the head dim compiled in
    if (D % 32 == 0) return dot_many_fast<T>(r, s, n, D, q, 1, o, 0);
#endif
    dot_fast<T>(r, s, n, D, q, o);
  }
};
template <FloatRows T>
struct AxpyFast {
  static void run(const uint8_t* r, int64_t s, int64_t n, int64_t D, const float* w, float* a) {
    axpy_fast<T>(r, s, n, D, w, a);
  }
};
#else
template <FloatRows T>
using DotFast = DotRef<T>;
template <FloatRows T>
using AxpyFast = AxpyRef<T>;
#endif

}  // namespace

void float_dot_rows(FloatRows t, const uint8_t* rows, int64_t stride, int64_t n, int64_t D,
                    const float* q, float* out) {
  dispatch<DotFast>(t, rows, stride, n, D, q, out);
}
void float_dot_rows_ref(FloatRows t, const uint8_t* rows, int64_t stride, int64_t n, int64_t D,
                        const float* q, float* out) {
  dispatch<DotRef>(t, rows, stride, n, D, q, out);
}
void float_axpy_rows(FloatRows t, const uint8_t* rows, int64_t stride, int64_t n, int64_t D,
                     const float* w, float* acc) {
  dispatch<AxpyFast>(t, rows, stride, n, D, w, acc);
}
void float_axpy_rows_ref(FloatRows t, const uint8_t* rows, int64_t stride, int64_t n, int64_t D,
                         const float* w, float* acc) {
  dispatch<AxpyRef>(t, rows, stride, n, D, w, acc);
}

void float_dot_rows_many(FloatRows t, const uint8_t* rows, int64_t stride, int64_t n, int64_t D,
                         const float* qs, int64_t nq, float* out, int64_t out_stride) {
#if defined(VQ_ROWS_AVX2)
  switch (t) {
    case FloatRows::F32:
      return dot_many_fast<FloatRows::F32>(rows, stride, n, D, qs, nq, out, out_stride);
    case FloatRows::F16:
      return dot_many_fast<FloatRows::F16>(rows, stride, n, D, qs, nq, out, out_stride);
    case FloatRows::BF16:
      return dot_many_fast<FloatRows::BF16>(rows, stride, n, D, qs, nq, out, out_stride);
  }
#else
  for (int64_t j = 0; j < nq; ++j)
    float_dot_rows(t, rows, stride, n, D, qs + j * D, out + j * out_stride);
#endif
}

void float_axpy_rows_many(FloatRows t, const uint8_t* rows, int64_t stride, int64_t n, int64_t D,
                          const float* w, int64_t w_stride, int64_t nw, float* acc) {
#if defined(VQ_ROWS_AVX2)
  switch (t) {
    case FloatRows::F32:
      return axpy_many_fast<FloatRows::F32>(rows, stride, n, D, w, w_stride, nw, acc);
    case FloatRows::F16:
      return axpy_many_fast<FloatRows::F16>(rows, stride, n, D, w, w_stride, nw, acc);
    case FloatRows::BF16:
      return axpy_many_fast<FloatRows::BF16>(rows, stride, n, D, w, w_stride, nw, acc);
  }
#else
  for (int64_t j = 0; j < nw; ++j)
    float_axpy_rows(t, rows, stride, n, D, w + j * w_stride, acc + j * D);
#endif
}

bool float_rows_vectorized() {
#if defined(VQ_ROWS_AVX2)
  return true;
#else
  return false;
#endif
}

}  // namespace vq::store

#include "coding/ggml_dot.hpp"

#include <algorithm>
#include <cstring>

#include "core/lane_tree.hpp"
#include "core/static_count.hpp"
#include "veloxquant/tensor.hpp"

#if defined(__AVX2__) && defined(__FMA__)
#define VQ_GGML_AVX2 1
#include <immintrin.h>
#endif

namespace vq::coding {

namespace {

inline float block_scale(const uint8_t* b) {
  return fp16_to_fp32(static_cast<uint16_t>(b[0] | (b[1] << 8)));
}

// Code j of a block of B values (q8_0: the int8; q4_0: the nibble minus 8).
inline int block_code(GgmlType t, int64_t B, const uint8_t* b, int64_t j) {
  if (t == GgmlType::Q8_0) {
    int8_t c;
    std::memcpy(&c, b + 2 + j, 1);
    return c;
  }
  const int64_t half = B / 2;
  const uint8_t byte = b[2 + (j % half)];
  return (j < half ? (byte & 0x0F) : (byte >> 4)) - 8;
}

}  // namespace

void ggml_dot_rows_ref(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                       int64_t D, const float* q, float* out) {
  const int64_t bb = ggml_block_bytes(t, block), nb = D / block;
  for (int64_t i = 0; i < n; ++i) {
    float total = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = rows + i * stride + b * bb;
      const float* x = q + b * block;
      float s = 0.0f;
      for (int64_t j = 0; j < block; ++j)
        s += static_cast<float>(block_code(t, block, blk, j)) * x[j];
      total += block_scale(blk) * s;
    }
    out[i] = total;
  }
}

void ggml_dot_rows_q8_ref(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                          int64_t D, const uint8_t* q8, float* out) {
  const int64_t bb = ggml_block_bytes(t, block), qb = ggml_block_bytes(GgmlType::Q8_0, block);
  const int64_t nb = D / block;
  for (int64_t i = 0; i < n; ++i) {
    float total = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = rows + i * stride + b * bb;
      const uint8_t* qblk = q8 + b * qb;
      int32_t s = 0;
      for (int64_t j = 0; j < block; ++j)
        s += block_code(t, block, blk, j) * block_code(GgmlType::Q8_0, block, qblk, j);
      total += static_cast<float>(s) * (block_scale(blk) * block_scale(qblk));
    }
    out[i] = total;
  }
}

void ggml_axpy_rows_ref(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                        int64_t D, const float* w, float* acc) {
  const int64_t bb = ggml_block_bytes(t, block), nb = D / block;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = rows + i * stride + b * bb;
      const float wd = w[i] * block_scale(blk);
      float* a = acc + b * block;
      for (int64_t j = 0; j < block; ++j)
        a[j] += wd * static_cast<float>(block_code(t, block, blk, j));
    }
}

#if defined(VQ_GGML_AVX2)

namespace {

// The block's fp16 scale (F16C's conversion when the build has it: the same value for every
// non-NaN input, and a NaN either way).
inline float fast_scale(const uint8_t* b) {
#if defined(__F16C__)
  return _cvtsh_ss(static_cast<unsigned short>(b[0] | (b[1] << 8)));
#else
  return block_scale(b);
#endif
}

// The codes of one block as int8 in value order: v[0] holds values 0..15 (block 8: 0..7 in its
// low half), v[1] values 16..31 (block 32 only).
template <GgmlType T, int B>
inline void block_i8(const uint8_t* blk, __m128i v[2]) {
  const uint8_t* c = blk + 2;
  if constexpr (T == GgmlType::Q8_0) {
    if constexpr (B == 8) {
      v[0] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c));
    } else {
      v[0] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c));
      if constexpr (B == 32) v[1] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 16));
    }
  } else {
    const __m128i m4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    __m128i x;
    if constexpr (B == 32) {
      x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c));
    } else if constexpr (B == 16) {
      x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c));
    } else {
      int32_t u;
      std::memcpy(&u, c, 4);
      x = _mm_cvtsi32_si128(u);
    }
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(x, m4), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(x, 4), m4), eight);
    if constexpr (B == 32) {
      v[0] = lo;
      v[1] = hi;
    } else if constexpr (B == 16) {
      v[0] = _mm_unpacklo_epi64(lo, hi);
    } else {
      v[0] = _mm_unpacklo_epi32(lo, hi);
    }
  }
}

// 8-value piece k (values 8k..8k+7) of a block decoded by block_i8, as floats.
inline __m256 piece_f32(const __m128i v[2], int k) {
  const __m128i src = v[k >> 1];
  const __m128i part = (k & 1) ? _mm_srli_si128(src, 8) : src;
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part));
}

inline float hsum(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Lane-wise sums of products of 16 int8 pairs: 8 int32 (pairs of neighbouring products).
inline __m256i madd16(__m128i a, __m128i b) {
  return _mm256_madd_epi16(_mm256_cvtepi8_epi16(a), _mm256_cvtepi8_epi16(b));
}

template <GgmlType T, int B>
struct Format {
  static constexpr GgmlType type = T;
  static constexpr int block = B;
};

// Calls f(Format<t, block>{}) for the formats the vector kernels cover; false for others.
template <typename F>
bool with_format(GgmlType t, int64_t block, F&& f) {
  const bool q8 = t == GgmlType::Q8_0;
  switch (block) {
    case 32:
      q8 ? f(Format<GgmlType::Q8_0, 32>{}) : f(Format<GgmlType::Q4_0, 32>{});
      return true;
    case 16:
      q8 ? f(Format<GgmlType::Q8_0, 16>{}) : f(Format<GgmlType::Q4_0, 16>{});
      return true;
    case 8:
      q8 ? f(Format<GgmlType::Q8_0, 8>{}) : f(Format<GgmlType::Q4_0, 8>{});
      return true;
    default:
      return false;
  }
}

// Values 8k..8k+7 of a block as fp32. q8_0 widens straight from memory (one vpmovsxbd per piece,
// no shuffles); q4_0 goes through the int8 codes unpacked by block_i8.
template <GgmlType T, int B>
inline __m256 piece(const uint8_t* blk, const __m128i v[2], int k) {
  if constexpr (T == GgmlType::Q8_0) {
    (void)v;
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * k))));
  } else {
    return piece_f32(v, k);
  }
}

// Four sums of 8 lanes each, reduced together: r[j] = sum of the lanes of a[j].
inline __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 s01 = _mm256_hadd_ps(a0, a1), s23 = _mm256_hadd_ps(a2, a3);
  const __m256 s = _mm256_hadd_ps(s01, s23);
  return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// One row's dot product kept as 8 lanes: per block, the 8-value pieces times the query in one
// chain, then scaled by the block's scale into acc (even blocks into acc0, odd into acc1).
template <GgmlType T, int B>
inline __m256 row_dot_lanes(const uint8_t* r, int64_t nb, const float* q) {
  constexpr int64_t bb = 2 + (T == GgmlType::Q8_0 ? B : B / 2);
  constexpr int pieces = B / 8;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = r + b * bb;
    const float* x = q + b * B;
    __m128i v[2];
    if constexpr (T != GgmlType::Q8_0) block_i8<T, B>(blk, v);
    __m256 s = _mm256_mul_ps(piece<T, B>(blk, v, 0), _mm256_loadu_ps(x));
    for (int k = 1; k < pieces; ++k)
      s = _mm256_fmadd_ps(piece<T, B>(blk, v, k), _mm256_loadu_ps(x + 8 * k), s);
    if (b & 1)
      acc1 = _mm256_fmadd_ps(_mm256_set1_ps(fast_scale(blk)), s, acc1);
    else
      acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fast_scale(blk)), s, acc0);
  }
  return _mm256_add_ps(acc0, acc1);
}

// Rows four at a time, their lane sums reduced together (one horizontal reduction per four
// rows); a row's result does not depend on which group it falls in.
template <GgmlType T, int B>
void dot_fast(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* q,
              float* out) {
  const int64_t nb = D / B;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint8_t* r = rows + i * stride;
    const __m256 a0 = row_dot_lanes<T, B>(r, nb, q);
    const __m256 a1 = row_dot_lanes<T, B>(r + stride, nb, q);
    const __m256 a2 = row_dot_lanes<T, B>(r + 2 * stride, nb, q);
    const __m256 a3 = row_dot_lanes<T, B>(r + 3 * stride, nb, q);
    _mm_storeu_ps(out + i, hsum4(a0, a1, a2, a3));
  }
  for (; i < n; ++i) {
    const __m256 a = row_dot_lanes<T, B>(rows + i * stride, nb, q);
    const __m256 z = _mm256_setzero_ps();
    out[i] = _mm_cvtss_f32(hsum4(a, z, z, z));
  }
}

template <GgmlType T, int B>
void dot_q8_fast(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const uint8_t* q8,
                 float* out) {
  constexpr int64_t bb = 2 + (T == GgmlType::Q8_0 ? B : B / 2), qb = 2 + B;
  const int64_t nb = D / B;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* r = rows + i * stride;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = r + b * bb;
      const uint8_t* qblk = q8 + b * qb;
      __m128i v[2], p[2];
      block_i8<T, B>(blk, v);
      block_i8<GgmlType::Q8_0, B>(qblk, p);
      __m256i s;
      if constexpr (B == 8) {
        s = _mm256_zextsi128_si256(
            _mm_madd_epi16(_mm_cvtepi8_epi16(v[0]), _mm_cvtepi8_epi16(p[0])));
      } else {
        s = madd16(v[0], p[0]);
        if constexpr (B == 32) s = _mm256_add_epi32(s, madd16(v[1], p[1]));
      }
      const float dd = fast_scale(blk) * fast_scale(qblk);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(s), acc);
    }
    out[i] = hsum(acc);
  }
}

// Rows four at a time: each block's slice of acc is loaded once and takes the four rows' terms in
// row order (one fused multiply-add each), the same bits as one row at a time.
template <GgmlType T, int B>
void axpy_fast(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* w,
               float* acc) {
  constexpr int64_t bb = 2 + (T == GgmlType::Q8_0 ? B : B / 2);
  constexpr int pieces = B / 8;
  const int64_t nb = D / B;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int64_t b = 0; b < nb; ++b) {
      float* a = acc + b * B;
      __m256 s[pieces];
      for (int k = 0; k < pieces; ++k) s[k] = _mm256_loadu_ps(a + 8 * k);
      for (int64_t r = i; r < i + 4; ++r) {
        const uint8_t* blk = rows + r * stride + b * bb;
        __m128i v[2];
        if constexpr (T != GgmlType::Q8_0) block_i8<T, B>(blk, v);
        const __m256 wd = _mm256_set1_ps(w[r] * fast_scale(blk));
        for (int k = 0; k < pieces; ++k) s[k] = _mm256_fmadd_ps(wd, piece<T, B>(blk, v, k), s[k]);
      }
      for (int k = 0; k < pieces; ++k) _mm256_storeu_ps(a + 8 * k, s[k]);
    }
  }
  for (; i < n; ++i)
    for (int64_t b = 0; b < nb; ++b) {
      float* a = acc + b * B;
      const uint8_t* blk = rows + i * stride + b * bb;
      __m128i v[2];
      if constexpr (T != GgmlType::Q8_0) block_i8<T, B>(blk, v);
      const __m256 wd = _mm256_set1_ps(w[i] * fast_scale(blk));
      for (int k = 0; k < pieces; ++k)
        _mm256_storeu_ps(a + 8 * k,
                         _mm256_fmadd_ps(wd, piece<T, B>(blk, v, k), _mm256_loadu_ps(a + 8 * k)));
    }
}

// dot_fast for nq queries (query j at qs + j * D, results at out + j * out_stride): each block's
// 8-value pieces are widened once per row and meet every query, each query keeping
// row_dot_lanes' operations in their order and the same four-lane reduction, so its results are
// the bits dot_fast gives it alone.
template <GgmlType T, int B, int NQ>
inline void row_dot_lanes_many(const uint8_t* r, int64_t nb, const float* qs, int64_t D,
                               __m256 out[NQ]) {
  constexpr int64_t bb = 2 + (T == GgmlType::Q8_0 ? B : B / 2);
  constexpr int pieces = B / 8;
  __m256 acc0[NQ], acc1[NQ];
  for (int j = 0; j < NQ; ++j) acc0[j] = acc1[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = r + b * bb;
    __m128i v[2];
    if constexpr (T != GgmlType::Q8_0) block_i8<T, B>(blk, v);
    __m256 p[pieces];
    for (int k = 0; k < pieces; ++k) p[k] = piece<T, B>(blk, v, k);
    const __m256 sc = _mm256_set1_ps(fast_scale(blk));
    for (int j = 0; j < NQ; ++j) {
      const float* x = qs + j * D + b * B;
      __m256 s = _mm256_mul_ps(p[0], _mm256_loadu_ps(x));
      for (int k = 1; k < pieces; ++k) s = _mm256_fmadd_ps(p[k], _mm256_loadu_ps(x + 8 * k), s);
      if (b & 1)
        acc1[j] = _mm256_fmadd_ps(sc, s, acc1[j]);
      else
        acc0[j] = _mm256_fmadd_ps(sc, s, acc0[j]);
    }
  }
  for (int j = 0; j < NQ; ++j) out[j] = _mm256_add_ps(acc0[j], acc1[j]);
}

template <GgmlType T, int B, int NQ>
void dot_many_group(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* qs,
                    float* out, int64_t out_stride) {
  const int64_t nb = D / B;
  const __m256 z = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; ++i) {
    __m256 a[4] = {z, z, z, z};
    row_dot_lanes_many<T, B, NQ>(rows + i * stride, nb, qs, D, a);
    // each lane sum through hsum4, as dot_fast reduces every row (a zero lane group changes no
    // sum's bits)
    alignas(16) float r[4];
    _mm_store_ps(r, hsum4(a[0], a[1], a[2], a[3]));
    for (int j = 0; j < NQ; ++j) out[j * out_stride + i] = r[j];
  }
}

template <GgmlType T, int B>
void dot_many_fast(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* qs,
                   int64_t nq, float* out, int64_t out_stride) {
  int64_t j = 0;
  for (; j + 4 <= nq; j += 4)
    dot_many_group<T, B, 4>(rows, stride, n, D, qs + j * D, out + j * out_stride, out_stride);
  const int64_t left = nq - j;
  if (left == 3)
    dot_many_group<T, B, 3>(rows, stride, n, D, qs + j * D, out + j * out_stride, out_stride);
  if (left == 2)
    dot_many_group<T, B, 2>(rows, stride, n, D, qs + j * D, out + j * out_stride, out_stride);
  if (left == 1)
    dot_many_group<T, B, 1>(rows, stride, n, D, qs + j * D, out + j * out_stride, out_stride);
}

#if defined(__AVX512F__)
// q8_0 blocks of 16 or 32 values with 512-bit registers, NQ <= 4 queries, 16 rows at a time (the
// one-query path, ggml_dot_rows, runs it with NQ = 1, so a query gets the same bits either way).
// Per row and query, one 16-lane accumulator: per block, its 16-value pieces (codes widened
// straight from memory) times the query in one chain (a multiply, then a multiply-add per further
// piece), added in by a multiply-add with the block's scale; then the 16 lanes of 16 rows are
// summed together (core/lane_tree.hpp), each row in the same tree whatever rows share its
// registers (missing rows of the last 16 are zeros). DC > 0 is D known at compile time (0: D at
// run time); with it the loops over a row unroll and the queries stay in registers.
// micro_codec GqaAttention/2/1 (q8_0 scores, 4096 rows, D = 64, 4 queries, one thread): 40.2 µs
// with the 256-bit kernel (dot_many_group, which builds without AVX-512 still use; 37.7-40.4 with
// D compiled into it), 19.8 µs with this one (fastest of 5, interleaved).
template <int B, int NQ, int DC>
void q8_dot_rows16(const uint8_t* rows, int64_t stride, int64_t n, int64_t Drun, const float* qs,
                   float* out, int64_t out_stride) {
  const int64_t D = DC > 0 ? DC : Drun;
  constexpr int64_t bb = 2 + B;
  constexpr int kPer = B / 16;  // pieces per block
  const int64_t nb = D / B;
  const auto lanes = [&](const uint8_t* r, __m512(&t)[NQ]) {
    for (int j = 0; j < NQ; ++j) t[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = r + b * bb;
      __m512 c[kPer];
      for (int k = 0; k < kPer; ++k)
        c[k] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2 + 16 * k))));
      const __m512 sc = _mm512_set1_ps(fast_scale(blk));
      for (int j = 0; j < NQ; ++j) {
        const float* x = qs + j * D + b * B;
        __m512 s = _mm512_mul_ps(c[0], _mm512_loadu_ps(x));
        for (int k = 1; k < kPer; ++k) s = _mm512_fmadd_ps(c[k], _mm512_loadu_ps(x + 16 * k), s);
        t[j] = _mm512_fmadd_ps(sc, s, t[j]);
      }
    }
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    simd::sum_rows16<NQ>(lanes, rows + i * stride, stride, out + i, out_stride);
  if (i == n) return;
  // the last rows, with zero rows beside them
  const int64_t m = n - i;
  __m512 t[16][NQ];
  for (int64_t k = 0; k < 16; ++k) {
    if (k < m) {
      lanes(rows + (i + k) * stride, t[k]);
    } else {
      for (int j = 0; j < NQ; ++j) t[k][j] = _mm512_setzero_ps();
    }
  }
  for (int j = 0; j < NQ; ++j) {
    __m512 y[4];
    for (int g = 0; g < 4; ++g)
      y[g] = simd::reduce_rows4(t[4 * g][j], t[4 * g + 1][j], t[4 * g + 2][j], t[4 * g + 3][j]);
    _mm512_mask_storeu_ps(out + j * out_stride + i, static_cast<__mmask16>((1u << m) - 1u),
                          simd::reduce_rows16(y[0], y[1], y[2], y[3]));
  }
}

// q8_dot_rows16 for nq queries, four at a time, with the head dims models use compiled for.
template <int B>
void q8_dot_many16(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* qs,
                   int64_t nq, float* out, int64_t out_stride) {
  for (int64_t j = 0; j < nq; j += 4)
    with_static_count<4>(nq - j, [&](auto c) {
      constexpr int NQ = decltype(c)::value;
      const float* q = qs + j * D;
      float* o = out + j * out_stride;
      with_head_dim(D, [&](auto dc) {
        q8_dot_rows16<B, NQ, decltype(dc)::value>(rows, stride, n, D, q, o, out_stride);
      });
    });
}
#endif

#if defined(__AVX512F__)
// q8_0 blocks of 16 or 32 values, NW <= 4 weight rows: values [d0, d0 + 16 G) of the
// accumulators held in registers over all n rows, each row's 16-value pieces widened once and
// added into every accumulator as axpy_fast adds them (w_i d times the code, one multiply-add per
// row in row order: the same bits), without loading and storing the accumulators per four rows.
template <int B, int NW, int G>
void q8_axpy_span(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* w,
                  int64_t w_stride, int64_t d0, float* acc) {
  constexpr int64_t bb = 2 + B;
  constexpr int kPer = B / 16;               // pieces per block
  constexpr int NB = (G + kPer - 1) / kPer;  // blocks in the span
  int64_t at[G], blk[NB];  // piece k's codes and block b's scale: offsets in a row
  for (int k = 0; k < G; ++k) at[k] = (d0 + 16 * k) / B * bb + 2 + (d0 + 16 * k) % B;
  for (int b = 0; b < NB; ++b) blk[b] = (d0 + 16 * kPer * b) / B * bb;
  __m512 a[NW][G];
  for (int j = 0; j < NW; ++j)
    for (int k = 0; k < G; ++k) a[j][k] = _mm512_loadu_ps(acc + j * D + d0 + 16 * k);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* r = rows + i * stride;
    __m512 x[G];
    for (int k = 0; k < G; ++k)
      x[k] = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + at[k]))));
    float sc[NB];
    for (int b = 0; b < NB; ++b) sc[b] = fast_scale(r + blk[b]);
    for (int j = 0; j < NW; ++j) {
      const float wj = w[j * w_stride + i];
      for (int b = 0; b < NB; ++b) {
        const __m512 wd = _mm512_set1_ps(wj * sc[b]);
        for (int k = kPer * b; k < std::min(G, kPer * (b + 1)); ++k)
          a[j][k] = _mm512_fmadd_ps(wd, x[k], a[j][k]);
      }
    }
  }
  for (int j = 0; j < NW; ++j)
    for (int k = 0; k < G; ++k) _mm512_storeu_ps(acc + j * D + d0 + 16 * k, a[j][k]);
}

template <int B, int NW>
void q8_axpy_group(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* w,
                   int64_t w_stride, float* acc) {
  for (int64_t d0 = 0; d0 < D; d0 += 64)
    with_static_count<4>((std::min<int64_t>(64, D - d0)) / 16, [&](auto g) {
      q8_axpy_span<B, NW, decltype(g)::value>(rows, stride, n, D, w, w_stride, d0, acc);
    });
}
#endif

// axpy_fast for nw weight rows (weights j at w + j * w_stride, accumulator j at acc + j * D):
// four rows' pieces of a block widened once and added into every accumulator, each taking
// axpy_fast's operations in its order (q8_0 blocks of 16 or 32 values on AVX-512 builds, head
// dims a multiple of 16: q8_axpy_group above).
template <GgmlType T, int B>
void axpy_many_fast(const uint8_t* rows, int64_t stride, int64_t n, int64_t D, const float* w,
                    int64_t w_stride, int64_t nw, float* acc) {
#if defined(__AVX512F__)
  if constexpr (T == GgmlType::Q8_0 && (B == 16 || B == 32)) {
    if (D % 16 == 0) {
      for (int64_t j = 0; j < nw; j += 4)
        with_static_count<4>(nw - j, [&](auto nw_c) {
          q8_axpy_group<B, decltype(nw_c)::value>(rows, stride, n, D, w + j * w_stride, w_stride,
                                                  acc + j * D);
        });
      return;
    }
  }
#endif
  constexpr int64_t bb = 2 + (T == GgmlType::Q8_0 ? B : B / 2);
  constexpr int pieces = B / 8;
  const int64_t nb = D / B;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int64_t b = 0; b < nb; ++b) {
      __m256 p[4][pieces];
      float sc[4];
      for (int r = 0; r < 4; ++r) {
        const uint8_t* blk = rows + (i + r) * stride + b * bb;
        __m128i v[2];
        if constexpr (T != GgmlType::Q8_0) block_i8<T, B>(blk, v);
        for (int k = 0; k < pieces; ++k) p[r][k] = piece<T, B>(blk, v, k);
        sc[r] = fast_scale(blk);
      }
      for (int64_t j = 0; j < nw; ++j) {
        const float* wj = w + j * w_stride + i;
        float* a = acc + j * D + b * B;
        __m256 s[pieces];
        for (int k = 0; k < pieces; ++k) s[k] = _mm256_loadu_ps(a + 8 * k);
        for (int r = 0; r < 4; ++r) {
          const __m256 wd = _mm256_set1_ps(wj[r] * sc[r]);
          for (int k = 0; k < pieces; ++k) s[k] = _mm256_fmadd_ps(wd, p[r][k], s[k]);
        }
        for (int k = 0; k < pieces; ++k) _mm256_storeu_ps(a + 8 * k, s[k]);
      }
    }
  }
  for (; i < n; ++i)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = rows + i * stride + b * bb;
      __m128i v[2];
      if constexpr (T != GgmlType::Q8_0) block_i8<T, B>(blk, v);
      __m256 p[pieces];
      for (int k = 0; k < pieces; ++k) p[k] = piece<T, B>(blk, v, k);
      const float sc = fast_scale(blk);
      for (int64_t j = 0; j < nw; ++j) {
        float* a = acc + j * D + b * B;
        const __m256 wd = _mm256_set1_ps(w[j * w_stride + i] * sc);
        for (int k = 0; k < pieces; ++k)
          _mm256_storeu_ps(a + 8 * k, _mm256_fmadd_ps(wd, p[k], _mm256_loadu_ps(a + 8 * k)));
      }
    }
}

}  // namespace

void ggml_dot_rows(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                   int64_t D, const float* q, float* out) {
#if defined(__AVX512F__)
  if (t == GgmlType::Q8_0 && (block == 16 || block == 32) && D % block == 0)
    return block == 32 ? q8_dot_many16<32>(rows, stride, n, D, q, 1, out, 0)
                       : q8_dot_many16<16>(rows, stride, n, D, q, 1, out, 0);
#endif
  if (!with_format(t, block, [&](auto f) {
        dot_fast<decltype(f)::type, decltype(f)::block>(rows, stride, n, D, q, out);
      }))
    ggml_dot_rows_ref(t, block, rows, stride, n, D, q, out);
}

void ggml_dot_rows_q8(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                      int64_t D, const uint8_t* q8, float* out) {
  if (!with_format(t, block, [&](auto f) {
        dot_q8_fast<decltype(f)::type, decltype(f)::block>(rows, stride, n, D, q8, out);
      }))
    ggml_dot_rows_q8_ref(t, block, rows, stride, n, D, q8, out);
}

void ggml_axpy_rows(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                    int64_t D, const float* w, float* acc) {
  if (!with_format(t, block, [&](auto f) {
        axpy_fast<decltype(f)::type, decltype(f)::block>(rows, stride, n, D, w, acc);
      }))
    ggml_axpy_rows_ref(t, block, rows, stride, n, D, w, acc);
}

void ggml_dot_rows_many(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                        int64_t D, const float* qs, int64_t nq, float* out, int64_t out_stride) {
#if defined(__AVX512F__)
  if (t == GgmlType::Q8_0 && (block == 16 || block == 32) && D % block == 0)
    return block == 32 ? q8_dot_many16<32>(rows, stride, n, D, qs, nq, out, out_stride)
                       : q8_dot_many16<16>(rows, stride, n, D, qs, nq, out, out_stride);
#endif
  if (!with_format(t, block, [&](auto f) {
        dot_many_fast<decltype(f)::type, decltype(f)::block>(rows, stride, n, D, qs, nq, out,
                                                             out_stride);
      }))
    for (int64_t j = 0; j < nq; ++j)
      ggml_dot_rows_ref(t, block, rows, stride, n, D, qs + j * D, out + j * out_stride);
}

void ggml_axpy_rows_many(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                         int64_t D, const float* w, int64_t w_stride, int64_t nw, float* acc) {
  if (!with_format(t, block, [&](auto f) {
        axpy_many_fast<decltype(f)::type, decltype(f)::block>(rows, stride, n, D, w, w_stride, nw,
                                                              acc);
      }))
    for (int64_t j = 0; j < nw; ++j)
      ggml_axpy_rows_ref(t, block, rows, stride, n, D, w + j * w_stride, acc + j * D);
}

bool ggml_dot_vectorized() {
  return true;
}

#else

void ggml_dot_rows(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                   int64_t D, const float* q, float* out) {
  ggml_dot_rows_ref(t, block, rows, stride, n, D, q, out);
}
void ggml_dot_rows_q8(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                      int64_t D, const uint8_t* q8, float* out) {
  ggml_dot_rows_q8_ref(t, block, rows, stride, n, D, q8, out);
}
void ggml_axpy_rows(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                    int64_t D, const float* w, float* acc) {
  ggml_axpy_rows_ref(t, block, rows, stride, n, D, w, acc);
}
void ggml_dot_rows_many(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                        int64_t D, const float* qs, int64_t nq, float* out, int64_t out_stride) {
  for (int64_t j = 0; j < nq; ++j)
    ggml_dot_rows_ref(t, block, rows, stride, n, D, qs + j * D, out + j * out_stride);
}
void ggml_axpy_rows_many(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                         int64_t D, const float* w, int64_t w_stride, int64_t nw, float* acc) {
  for (int64_t j = 0; j < nw; ++j)
    ggml_axpy_rows_ref(t, block, rows, stride, n, D, w + j * w_stride, acc + j * D);
}
bool ggml_dot_vectorized() {
  return false;
}

#endif

}  // namespace vq::coding

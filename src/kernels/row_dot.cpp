// Fused row dot products (see row_dot.hpp). Block layouts: src/formats/ggml_types.cpp.
#include "kernels/row_dot.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "formats/bf16.hpp"
#include "veloxquant/errors.hpp"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define VQ_ROW_DOT_AVX2 1
#include <immintrin.h>
#endif

namespace vq::kernels::detail {

#if defined(VQ_ROW_DOT_AVX2)
namespace {

// Sum of the 8 lanes in a fixed order.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline uint16_t rd16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
inline float half_at(const uint8_t* p) {
  return _cvtsh_ss(rd16(p));
}
// 8 bytes at p, zero-extended to 8 int32 lanes.
inline __m256i u8x8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 ld(const float* p) {
  return _mm256_loadu_ps(p);
}

// F16 / BF16: 8 values per 16 bytes; four accumulators over 32 values per step.
template <bool kBf16>
inline __m256 wide8(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kBf16) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_cvtph_ps(h);
  }
}
template <bool kBf16>
float dot_16bit(const uint8_t* w, const RowDotInput& in) {
  const float* x = in.x;
  const int64_t n = in.cols;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(wide8<kBf16>(w + 2 * i), ld(x + i), a0);
    a1 = _mm256_fmadd_ps(wide8<kBf16>(w + 2 * i + 16), ld(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(wide8<kBf16>(w + 2 * i + 32), ld(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(wide8<kBf16>(w + 2 * i + 48), ld(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(wide8<kBf16>(w + 2 * i), ld(x + i), a0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) {
    const uint16_t h = rd16(w + 2 * i);
    s += (kBf16 ? formats::bf16_bits_to_float(h) : _cvtsh_ss(h)) * x[i];
  }
  return s;
}

// The block-quantized types multiply integers: the input's 32-value block b is held as int16
// q (|q| <= 32767) with x ~= scale[b] * q, and a weight block's integer codes meet q in
// _mm256_madd_epi16 (pairs of int16 products summed into int32 lanes). Every lane sum stays
// below 2^24 (at most 4 products of |code| <= 128 and |q| <= 32767), so the integer sums are exact,
// and so is their conversion to float; the only rounding beyond fp32 summation is q's (at most
// half of scale[b] per input value).
inline __m256i ld16(const int16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline __m128i ld128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
inline __m256i ld256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
// Sum over a 32-value block of signed 8-bit codes c (two halves of 16) times the block's q.
inline __m256i isum32(__m128i c_lo, __m128i c_hi, const int16_t* q) {
  return _mm256_add_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(c_lo), ld16(q)),
                          _mm256_madd_epi16(_mm256_cvtepi8_epi16(c_hi), ld16(q + 16)));
}

// Q8_0 (34 B per 32 values): one exact integer block sum, scaled by d * scale[b] into one of two
// accumulators (even / odd blocks).
float dot_q8_0(const uint8_t* w, const RowDotInput& in) {
  const int64_t nb = in.cols / 32;
  const int16_t* q = in.q.data();
  const float* xs = in.scale.data();
  const auto block = [&](int64_t b, __m256 acc) {
    const uint8_t* p = w + 34 * b;
    const __m256i s = isum32(ld128(p + 2), ld128(p + 18), q + 32 * b);
    return _mm256_fmadd_ps(_mm256_set1_ps(half_at(p) * xs[b]), _mm256_cvtepi32_ps(s), acc);
  };
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    a0 = block(b, a0);
    a1 = block(b + 1, a1);
  }
  if (b < nb) a0 = block(b, a0);
  return hsum(_mm256_add_ps(a0, a1));
}

// Q4_0 (18 B per 32 values): byte j's low nibble is value j, its high nibble value j + 16,
// each minus 8.
float dot_q4_0(const uint8_t* w, const RowDotInput& in) {
  const int64_t nb = in.cols / 32;
  const int16_t* q = in.q.data();
  const float* xs = in.scale.data();
  const __m128i m4 = _mm_set1_epi8(0x0F), k8 = _mm_set1_epi8(8);
  const auto block = [&](int64_t b, __m256 acc) {
    const uint8_t* p = w + 18 * b;
    const __m128i raw = ld128(p + 2);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, m4), k8);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), k8);
    const __m256i s = isum32(lo, hi, q + 32 * b);
    return _mm256_fmadd_ps(_mm256_set1_ps(half_at(p) * xs[b]), _mm256_cvtepi32_ps(s), acc);
  };
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    a0 = block(b, a0);
    a1 = block(b + 1, a1);
  }
  if (b < nb) a0 = block(b, a0);
  return hsum(_mm256_add_ps(a0, a1));
}

// The 6-bit scale and min of sub-block s of a Q4_K super-block's 12 packed bytes.
inline void k_scale_min(const uint8_t* b, int s, int& sc, int& mn) {
  if (s < 4) {
    sc = b[s] & 63;
    mn = b[s + 4] & 63;
  } else {
    sc = (b[s + 4] & 0x0F) | ((b[s - 4] >> 6) << 4);
    mn = (b[s + 4] >> 4) | ((b[s] >> 6) << 4);
  }
}

// Q4_K (144 B per 256 values). Chunk c (32 bytes) holds sub-block 2c in its low nibbles and
// 2c + 1 in its high nibbles; weight = (d * sc) * code - dmin * mn. Per 32-value sub-block s
// (input block i): d * sc * scale[i] * sum(code * q) into a vector accumulator, and the min term
// dmin * mn * scale[i] * sum(q) into a scalar subtracted at the end.
float dot_q4_k(const uint8_t* w, const RowDotInput& in) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const int16_t* q = in.q.data();
  const float* xs = in.scale.data();
  const int32_t* qs = in.qsum.data();
  __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                 _mm256_setzero_ps()};
  float mins = 0.0f;
  for (int64_t sb = 0; sb < in.cols / 256; ++sb) {
    const uint8_t* b = w + 144 * sb;
    const float d = half_at(b), dmin = half_at(b + 2);
    float m = 0.0f;
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = ld256(b + 16 + 32 * c);
      const __m256i lo = _mm256_and_si256(raw, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
      for (int h = 0; h < 2; ++h) {
        const __m256i codes = h == 0 ? lo : hi;
        const int s = 2 * c + h;
        const int64_t i = 8 * sb + s;
        int sc, mn;
        k_scale_min(b + 4, s, sc, mn);
        const int16_t* qi = q + 32 * i;
        const __m256i sum = _mm256_add_epi32(
            _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(codes)), ld16(qi)),
            _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(codes, 1)),
                              ld16(qi + 16)));
        const int k = (c & 1) * 2 + h;
        a[k] = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc) * xs[i]),
                               _mm256_cvtepi32_ps(sum), a[k]);
        m += static_cast<float>(mn) * xs[i] * static_cast<float>(qs[i]);
      }
    }
    mins += dmin * m;
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]))) - mins;
}

// Q6_K (210 B per 256 values): two halves of 128; in each, for l < 32, values l, l + 32, l + 64,
// l + 96 take 4 low bits from ql[l], ql[l + 32] (low, low, high, high nibble) and 2 high bits
// from qh[l] (bits 0-1, 2-3, 4-5, 6-7), minus 32, times d * the int8 scale of the value's
// 16-value group. All 32 l at once with byte operations; each 16-value group's exact integer
// sum is scaled by d * sc * scale[i] into one of four accumulators.
float dot_q6_k(const uint8_t* w, const RowDotInput& in) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30),
                k32 = _mm256_set1_epi8(32);
  const int16_t* q = in.q.data();
  const float* xs = in.scale.data();
  __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                 _mm256_setzero_ps()};
  for (int64_t sb = 0; sb < in.cols / 256; ++sb) {
    const uint8_t* b = w + 210 * sb;
    const float d = half_at(b + 208);
    for (int hf = 0; hf < 2; ++hf) {
      const uint8_t* ql = b + 64 * hf;
      const __m256i la = ld256(ql), lb = ld256(ql + 32), hb = ld256(b + 128 + 32 * hf);
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * hf);
      __m256i v[4];
      v[0] = _mm256_or_si256(_mm256_and_si256(la, m4),
                             _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
      v[1] = _mm256_or_si256(_mm256_and_si256(lb, m4),
                             _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
      v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(la, 4), m4),
                             _mm256_and_si256(hb, m30));
      v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lb, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
      for (int j = 0; j < 4; ++j) {
        const __m256i c = _mm256_sub_epi8(v[j], k32);  // values 32j .. 32j + 31 of the half
        const int64_t i = 8 * sb + 4 * hf + j;
        const int16_t* qi = q + 32 * i;
        const __m256i s0 =
            _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(c)), ld16(qi));
        const __m256i s1 =
            _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(c, 1)), ld16(qi + 16));
        const float dx = d * xs[i];
        a[j] = _mm256_fmadd_ps(_mm256_set1_ps(dx * static_cast<float>(sc[2 * j])),
                               _mm256_cvtepi32_ps(s0), a[j]);
        a[j] = _mm256_fmadd_ps(_mm256_set1_ps(dx * static_cast<float>(sc[2 * j + 1])),
                               _mm256_cvtepi32_ps(s1), a[j]);
      }
    }
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
}

using DotFn = float (*)(const uint8_t*, const RowDotInput&);

DotFn dot_for(GgmlType t) {
  switch (t) {
    case GgmlType::F16:
      return dot_16bit<false>;
    case GgmlType::BF16:
      return dot_16bit<true>;
    case GgmlType::Q8_0:
      return dot_q8_0;
    case GgmlType::Q4_0:
      return dot_q4_0;
    case GgmlType::Q4_K:
      return dot_q4_k;
    case GgmlType::Q6_K:
      return dot_q6_k;
    default:
      return nullptr;
  }
}

}  // namespace

bool has_row_dot(GgmlType t) {
  return dot_for(t) != nullptr;
}

void dot_rows(const WeightMatrix& w, const RowDotInput& in, int64_t r0, int64_t r1, float* y,
              bool accumulate) {
  const DotFn fn = dot_for(w.type);
  VQ_CHECK(fn != nullptr, InvalidArgument, "kernels: no fused row dot for ",
           ggml_type_name(static_cast<uint32_t>(w.type)));
  VQ_CHECK(in.type == w.type && in.cols == w.cols, InvalidArgument,
           "kernels: row-dot input prepared for ", ggml_type_name(static_cast<uint32_t>(in.type)),
           " x ", in.cols, ", used with ", ggml_type_name(static_cast<uint32_t>(w.type)), " x ",
           w.cols);
  const uint64_t rb = w.row_bytes();
  for (int64_t r = r0; r < r1; ++r) {
    const float v = fn(w.data + static_cast<uint64_t>(r) * rb, in);
    y[r - r0] = accumulate ? y[r - r0] + v : v;
  }
}

#else  // no AVX2 + FMA + F16C: every type takes the tiled path

bool has_row_dot(GgmlType) {
  return false;
}

void dot_rows(const WeightMatrix& w, const RowDotInput&, int64_t, int64_t, float*, bool) {
  VQ_THROW(InvalidArgument, "kernels: no fused row dot for ",
           ggml_type_name(static_cast<uint32_t>(w.type)), " in this build");
}

#endif

bool row_dot_rounds_input(GgmlType t) {
  if (!has_row_dot(t)) return false;
  return t != GgmlType::F16 && t != GgmlType::BF16;
}

void prepare_row_dot_input(GgmlType t, const float* x, int64_t cols, RowDotInput& in) {
  in.type = t;
  in.x = x;
  in.cols = cols;
  if (!row_dot_rounds_input(t)) return;
  VQ_CHECK(cols % 32 == 0, InvalidArgument, "kernels: row-dot input of ", cols,
           " values is not a whole number of 32-value blocks");
  const int64_t nb = cols / 32;
  in.q.resize(static_cast<size_t>(cols));
  in.scale.resize(static_cast<size_t>(nb));
  in.qsum.resize(static_cast<size_t>(nb));
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + 32 * b;
    int16_t* qb = in.q.data() + 32 * b;
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < 32; ++i) {
      finite = finite && std::isfinite(xb[i]);
      amax = std::fabs(xb[i]) > amax ? std::fabs(xb[i]) : amax;
    }
    int32_t sum = 0;
    if (!finite || amax == 0.0f) {  // a non-finite input makes the block's products NaN
      for (int i = 0; i < 32; ++i) qb[i] = 0;
      in.scale[static_cast<size_t>(b)] = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    } else {
      const float inv = kInputLevels / amax;
      for (int i = 0; i < 32; ++i) {
        const float r = std::nearbyint(xb[i] * inv);
        const float c = r > kInputLevels ? kInputLevels : (r < -kInputLevels ? -kInputLevels : r);
        qb[i] = static_cast<int16_t>(c);
        sum += qb[i];
      }
      in.scale[static_cast<size_t>(b)] = amax / kInputLevels;
    }
    in.qsum[static_cast<size_t>(b)] = sum;
  }
}

void dot_rows(const WeightMatrix& w, const float* x, int64_t r0, int64_t r1, float* y,
              bool accumulate) {
  RowDotInput in;
  prepare_row_dot_input(w.type, x, w.cols, in);
  dot_rows(w, in, r0, r1, y, accumulate);
}

}  // namespace vq::kernels::detail

// Fused row dot products (see row_dot.hpp). Block layouts: src/formats/ggml_types.cpp.
#include "kernels/row_dot.hpp"

#include <cstring>

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
float dot_16bit(const uint8_t* w, const float* x, int64_t n) {
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

// Q8_0 (34 B per 32 values): the block's 32 products summed, then scaled by d into one of two
// accumulators (even / odd blocks).
inline __m256 q8_0_block(const uint8_t* b, const float* x) {
  const auto q = [&](int j) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * j))));
  };
  __m256 p0 = _mm256_mul_ps(q(0), ld(x));
  __m256 p1 = _mm256_mul_ps(q(1), ld(x + 8));
  p0 = _mm256_fmadd_ps(q(2), ld(x + 16), p0);
  p1 = _mm256_fmadd_ps(q(3), ld(x + 24), p1);
  return _mm256_add_ps(p0, p1);
}
float dot_q8_0(const uint8_t* w, const float* x, int64_t n) {
  const int64_t nb = n / 32;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    a0 = _mm256_fmadd_ps(_mm256_set1_ps(half_at(w + 34 * b)), q8_0_block(w + 34 * b, x + 32 * b),
                         a0);
    a1 = _mm256_fmadd_ps(_mm256_set1_ps(half_at(w + 34 * (b + 1))),
                         q8_0_block(w + 34 * (b + 1), x + 32 * (b + 1)), a1);
  }
  if (b < nb)
    a0 = _mm256_fmadd_ps(_mm256_set1_ps(half_at(w + 34 * b)), q8_0_block(w + 34 * b, x + 32 * b),
                         a0);
  return hsum(_mm256_add_ps(a0, a1));
}

// Q4_0 (18 B per 32 values): byte j's low nibble is value j, its high nibble value j + 16.
inline __m256 q4_0_block(const uint8_t* b, const float* x) {
  const __m256i lo_mask = _mm256_set1_epi32(0x0F), eight = _mm256_set1_epi32(8);
  const __m256i q0 = u8x8(b + 2), q1 = u8x8(b + 10);
  const auto lo = [&](__m256i q) {
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(q, lo_mask), eight));
  };
  const auto hi = [&](__m256i q) {
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(q, 4), eight));
  };
  __m256 p0 = _mm256_mul_ps(lo(q0), ld(x));
  __m256 p1 = _mm256_mul_ps(lo(q1), ld(x + 8));
  p0 = _mm256_fmadd_ps(hi(q0), ld(x + 16), p0);
  p1 = _mm256_fmadd_ps(hi(q1), ld(x + 24), p1);
  return _mm256_add_ps(p0, p1);
}
float dot_q4_0(const uint8_t* w, const float* x, int64_t n) {
  const int64_t nb = n / 32;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    a0 = _mm256_fmadd_ps(_mm256_set1_ps(half_at(w + 18 * b)), q4_0_block(w + 18 * b, x + 32 * b),
                         a0);
    a1 = _mm256_fmadd_ps(_mm256_set1_ps(half_at(w + 18 * (b + 1))),
                         q4_0_block(w + 18 * (b + 1), x + 32 * (b + 1)), a1);
  }
  if (b < nb)
    a0 = _mm256_fmadd_ps(_mm256_set1_ps(half_at(w + 18 * b)), q4_0_block(w + 18 * b, x + 32 * b),
                         a0);
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
// 2c + 1 in its high nibbles; weight = (d * sc) * q - dmin * mn, expanded 8 at a time and
// multiplied into four accumulators (low / high nibbles x even / odd 8-byte step).
float dot_q4_k(const uint8_t* w, const float* x, int64_t n) {
  const __m256i lo_mask = _mm256_set1_epi32(0x0F);
  __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                 _mm256_setzero_ps()};
  for (int64_t sb = 0; sb < n / 256; ++sb) {
    const uint8_t* b = w + 144 * sb;
    const float* xs = x + 256 * sb;
    const float d = half_at(b), dmin = half_at(b + 2);
    const uint8_t* q = b + 16;
    for (int c = 0; c < 4; ++c) {
      int sc0, mn0, sc1, mn1;
      k_scale_min(b + 4, 2 * c, sc0, mn0);
      k_scale_min(b + 4, 2 * c + 1, sc1, mn1);
      const __m256 d0 = _mm256_set1_ps(d * static_cast<float>(sc0));
      const __m256 m0 = _mm256_set1_ps(dmin * static_cast<float>(mn0));
      const __m256 d1 = _mm256_set1_ps(d * static_cast<float>(sc1));
      const __m256 m1 = _mm256_set1_ps(dmin * static_cast<float>(mn1));
      for (int h = 0; h < 4; ++h) {
        const __m256i bytes = u8x8(q + 32 * c + 8 * h);
        const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(bytes, lo_mask));
        const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(bytes, 4));
        const int k = (h & 1) * 2;
        a[k] = _mm256_fmadd_ps(_mm256_fmsub_ps(d0, lo, m0), ld(xs + 64 * c + 8 * h), a[k]);
        a[k + 1] =
            _mm256_fmadd_ps(_mm256_fmsub_ps(d1, hi, m1), ld(xs + 64 * c + 32 + 8 * h), a[k + 1]);
      }
    }
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
}

// Q6_K (210 B per 256 values): two halves of 128; in each, for l < 32, values l, l + 32, l + 64,
// l + 96 take 4 low bits from ql[l], ql[l + 32] (low, low, high, high nibble) and 2 high bits
// from qh[l] (bits 0-1, 2-3, 4-5, 6-7), minus 32, times d * the int8 scale of the value's
// 16-value group. The weight d * sc * v is formed as in the scalar decoder.
float dot_q6_k(const uint8_t* w, const float* x, int64_t n) {
  const __m256i m4 = _mm256_set1_epi32(0x0F), m2 = _mm256_set1_epi32(3),
                k32 = _mm256_set1_epi32(32);
  __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                 _mm256_setzero_ps()};
  for (int64_t sb = 0; sb < n / 256; ++sb) {
    const uint8_t* b = w + 210 * sb;
    const float d = half_at(b + 208);
    for (int hf = 0; hf < 2; ++hf) {
      const uint8_t* ql = b + 64 * hf;
      const uint8_t* qh = b + 128 + 32 * hf;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * hf);
      const float* xs = x + 256 * sb + 128 * hf;
      for (int l = 0; l < 32; l += 8) {
        const int g = l / 16;
        const __m256i la = u8x8(ql + l), lb = u8x8(ql + l + 32), hb = u8x8(qh + l);
        const auto val = [&](__m256i low4, int shift) {
          const __m256i top = _mm256_and_si256(_mm256_srli_epi32(hb, shift), m2);
          return _mm256_cvtepi32_ps(
              _mm256_sub_epi32(_mm256_or_si256(low4, _mm256_slli_epi32(top, 4)), k32));
        };
        const __m256 v0 = val(_mm256_and_si256(la, m4), 0);
        const __m256 v1 = val(_mm256_and_si256(lb, m4), 2);
        const __m256 v2 = val(_mm256_srli_epi32(la, 4), 4);
        const __m256 v3 = val(_mm256_srli_epi32(lb, 4), 6);
        const auto scale = [&](int j) { return _mm256_set1_ps(d * static_cast<float>(sc[g + j])); };
        a[0] = _mm256_fmadd_ps(_mm256_mul_ps(scale(0), v0), ld(xs + l), a[0]);
        a[1] = _mm256_fmadd_ps(_mm256_mul_ps(scale(2), v1), ld(xs + l + 32), a[1]);
        a[2] = _mm256_fmadd_ps(_mm256_mul_ps(scale(4), v2), ld(xs + l + 64), a[2]);
        a[3] = _mm256_fmadd_ps(_mm256_mul_ps(scale(6), v3), ld(xs + l + 96), a[3]);
      }
    }
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
}

using DotFn = float (*)(const uint8_t*, const float*, int64_t);

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

void dot_rows(const WeightMatrix& w, const float* x, int64_t r0, int64_t r1, float* y,
              bool accumulate) {
  const DotFn fn = dot_for(w.type);
  VQ_CHECK(fn != nullptr, InvalidArgument, "kernels: no fused row dot for ",
           ggml_type_name(static_cast<uint32_t>(w.type)));
  const uint64_t rb = w.row_bytes();
  for (int64_t r = r0; r < r1; ++r) {
    const float v = fn(w.data + static_cast<uint64_t>(r) * rb, x, w.cols);
    y[r - r0] = accumulate ? y[r - r0] + v : v;
  }
}

#else  // no AVX2 + FMA + F16C: every type takes the tiled path

bool has_row_dot(GgmlType) {
  return false;
}

void dot_rows(const WeightMatrix& w, const float*, int64_t, int64_t, float*, bool) {
  VQ_THROW(InvalidArgument, "kernels: no fused row dot for ",
           ggml_type_name(static_cast<uint32_t>(w.type)), " in this build");
}

#endif

}  // namespace vq::kernels::detail

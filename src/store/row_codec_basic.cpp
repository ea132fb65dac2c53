// fp16 / bf16 resident rows and the bulk fp32 <-> 16-bit converters.
#include <cstring>

#include "store/row_codec.hpp"
#include "veloxquant/tensor.hpp"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace vq::store {

void fp32_to_fp16_n(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void fp16_to_fp32_n(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

void fp32_to_bf16_n(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &src[i], 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a (quiet) NaN
      dst[i] = static_cast<uint16_t>((u >> 16) | 0x0040u);
      continue;
    }
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    dst[i] = static_cast<uint16_t>(u >> 16);
  }
}

void bf16_to_fp32_n(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(&dst[i], &u, 4);
  }
}

void Fp16Codec::encode(const float* rows, int64_t n, uint8_t*, uint8_t* codes) {
  fp32_to_fp16_n(rows, reinterpret_cast<uint16_t*>(codes), n * dim());
}

void Fp16Codec::decode(const uint8_t*, const uint8_t* codes, int64_t n, float* out) const {
  fp16_to_fp32_n(reinterpret_cast<const uint16_t*>(codes), out, n * dim());
}

void Bf16Codec::encode(const float* rows, int64_t n, uint8_t*, uint8_t* codes) {
  fp32_to_bf16_n(rows, reinterpret_cast<uint16_t*>(codes), n * dim());
}

void Bf16Codec::decode(const uint8_t*, const uint8_t* codes, int64_t n, float* out) const {
  bf16_to_fp32_n(reinterpret_cast<const uint16_t*>(codes), out, n * dim());
}

}  // namespace vq::store

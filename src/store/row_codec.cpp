// fp16 / bf16 row codecs and the bulk conversions under them.
//
// The vector path (F16C) and the scalar path give the same bits for every input: both round to
// nearest even, overflow to +-inf and keep subnormals. The hardware differs from vq::fp32_to_fp16
// / fp16_to_fp32 only on NaNs (F16C keeps the top payload bits and quiets a signalling NaN; the
// scalar narrowing writes the canonical quiet NaN, the scalar widening keeps every bit), so a
// group of eight values holding a NaN is converted by the scalar code.
#include "store/row_codec.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "store/row_kernels.hpp"
#include "veloxquant/row_source.hpp"
#include "veloxquant/tensor.hpp"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace vq::store {

namespace {

inline void store_u16(uint16_t* p, uint16_t v) {
  std::memcpy(p, &v, 2);
}
inline uint16_t load_u16(const uint16_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// The n rows at codes as a RowSource whose read() decodes them: the default dot_rows /
// axpy_rows are RowSource's defaults over it (decode into per-thread scratch, fp32 kernel).
class DecodedRows final : public RowSource {
 public:
  DecodedRows(const RowCodec& c, const uint8_t* params, const uint8_t* codes, int64_t n)
      : c_(c), params_(params), codes_(codes), n_(n) {}
  int64_t rows() const override { return n_; }
  int64_t dim() const override { return c_.dim(); }
  void read(int64_t first, int64_t n, float* out) const override {
    c_.decode(params_, codes_ + first * c_.row_bytes(), n, out);
  }

 private:
  const RowCodec& c_;
  const uint8_t* params_;
  const uint8_t* codes_;
  int64_t n_;
};

}  // namespace

void RowCodec::dot_rows_many(const uint8_t* params, const uint8_t* codes, int64_t n,
                             const float* qs, int64_t nq, float* out, int64_t out_stride) const {
  for (int64_t j = 0; j < nq; ++j) dot_rows(params, codes, n, qs + j * dim(), out + j * out_stride);
}

void RowCodec::axpy_rows_many(const uint8_t* params, const uint8_t* codes, int64_t n,
                              const float* w, int64_t w_stride, int64_t nw, float* acc) const {
  for (int64_t j = 0; j < nw; ++j) axpy_rows(params, codes, n, w + j * w_stride, acc + j * dim());
}

void RowCodec::axpy_latent_many(const uint8_t* params, const uint8_t* codes, int64_t n,
                                const float* w, int64_t w_stride, int64_t nw, float* lat,
                                int64_t lat_stride) const {
  for (int64_t j = 0; j < nw; ++j)
    axpy_latent(params, codes, n, w + j * w_stride, lat + j * lat_stride);
}

void RowCodec::dot_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* q,
                        float* out) const {
  DecodedRows(*this, params, codes, n).dot(0, n, q, out);
}

void RowCodec::axpy_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                         float* acc) const {
  DecodedRows(*this, params, codes, n).accumulate(0, n, w, acc);
}

void fp32_to_fp16_n(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
      for (int64_t j = i; j < i + 8; ++j) store_u16(dst + j, fp32_to_fp16(src[j]));
      continue;
    }
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  for (; i < n; ++i) store_u16(dst + i, fp32_to_fp16(src[i]));
}

void fp16_to_fp32_n(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  const __m128i abs_mask = _mm_set1_epi16(0x7FFF), inf = _mm_set1_epi16(0x7C00);
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    // F16C quiets a signalling NaN (sets the top mantissa bit); the scalar widening keeps the
    // bits as they are, so a group holding a NaN goes the scalar way.
    if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, abs_mask), inf)) != 0) {
      for (int64_t j = i; j < i + 8; ++j) dst[j] = fp16_to_fp32(load_u16(src + j));
      continue;
    }
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = fp16_to_fp32(load_u16(src + i));
}

void fp32_to_bf16_n(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_u16(dst + i, vq::fp32_to_bf16(src[i]));
}

void bf16_to_fp32_n(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(load_u16(src + i)) << 16;
    std::memcpy(dst + i, &bits, 4);
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

void Fp16Codec::dot_rows(const uint8_t*, const uint8_t* codes, int64_t n, const float* q,
                         float* out) const {
  float_dot_rows(FloatRows::F16, codes, 2 * dim(), n, dim(), q, out);
}
void Fp16Codec::axpy_rows(const uint8_t*, const uint8_t* codes, int64_t n, const float* w,
                          float* acc) const {
  float_axpy_rows(FloatRows::F16, codes, 2 * dim(), n, dim(), w, acc);
}
void Bf16Codec::dot_rows(const uint8_t*, const uint8_t* codes, int64_t n, const float* q,
                         float* out) const {
  float_dot_rows(FloatRows::BF16, codes, 2 * dim(), n, dim(), q, out);
}
void Bf16Codec::axpy_rows(const uint8_t*, const uint8_t* codes, int64_t n, const float* w,
                          float* acc) const {
  float_axpy_rows(FloatRows::BF16, codes, 2 * dim(), n, dim(), w, acc);
}
void Fp32Codec::dot_rows(const uint8_t*, const uint8_t* codes, int64_t n, const float* q,
                         float* out) const {
  float_dot_rows(FloatRows::F32, codes, 4 * dim(), n, dim(), q, out);
}
void Fp32Codec::axpy_rows(const uint8_t*, const uint8_t* codes, int64_t n, const float* w,
                          float* acc) const {
  float_axpy_rows(FloatRows::F32, codes, 4 * dim(), n, dim(), w, acc);
}

void Fp16Codec::dot_rows_many(const uint8_t*, const uint8_t* codes, int64_t n, const float* qs,
                              int64_t nq, float* out, int64_t out_stride) const {
  float_dot_rows_many(FloatRows::F16, codes, 2 * dim(), n, dim(), qs, nq, out, out_stride);
}
void Fp16Codec::axpy_rows_many(const uint8_t*, const uint8_t* codes, int64_t n, const float* w,
                               int64_t w_stride, int64_t nw, float* acc) const {
  float_axpy_rows_many(FloatRows::F16, codes, 2 * dim(), n, dim(), w, w_stride, nw, acc);
}
void Bf16Codec::dot_rows_many(const uint8_t*, const uint8_t* codes, int64_t n, const float* qs,
                              int64_t nq, float* out, int64_t out_stride) const {
  float_dot_rows_many(FloatRows::BF16, codes, 2 * dim(), n, dim(), qs, nq, out, out_stride);
}
void Bf16Codec::axpy_rows_many(const uint8_t*, const uint8_t* codes, int64_t n, const float* w,
                               int64_t w_stride, int64_t nw, float* acc) const {
  float_axpy_rows_many(FloatRows::BF16, codes, 2 * dim(), n, dim(), w, w_stride, nw, acc);
}
void Fp32Codec::dot_rows_many(const uint8_t*, const uint8_t* codes, int64_t n, const float* qs,
                              int64_t nq, float* out, int64_t out_stride) const {
  float_dot_rows_many(FloatRows::F32, codes, 4 * dim(), n, dim(), qs, nq, out, out_stride);
}
void Fp32Codec::axpy_rows_many(const uint8_t*, const uint8_t* codes, int64_t n, const float* w,
                               int64_t w_stride, int64_t nw, float* acc) const {
  float_axpy_rows_many(FloatRows::F32, codes, 4 * dim(), n, dim(), w, w_stride, nw, acc);
}

void round_trip_rows(RowCodec& c, float* rows, int64_t n, int64_t stride) {
  const int64_t D = c.dim();
  if (c.chunk_rows() > 0) {
    std::vector<uint16_t> h(static_cast<size_t>(D));
    for (int64_t i = 0; i < n; ++i) {
      fp32_to_fp16_n(rows + i * stride, h.data(), D);
      fp16_to_fp32_n(h.data(), rows + i * stride, D);
    }
    return;
  }
  std::vector<uint8_t> code(static_cast<size_t>(c.row_bytes()));
  for (int64_t i = 0; i < n; ++i) {
    c.encode(rows + i * stride, 1, nullptr, code.data());
    c.decode(nullptr, code.data(), 1, rows + i * stride);
  }
}

}  // namespace vq::store

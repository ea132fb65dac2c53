// ggml's reference quantizers evaluate every product and sum as its own rounded IEEE operation;
// forbid the compiler from fusing them, so our bytes match theirs on every target.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "coding/ggml_blocks.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "veloxquant/tensor.hpp"

namespace vq::coding {

namespace {

void put_scale(float d, uint8_t* out) {
  const uint16_t h = fp32_to_fp16(d);
  out[0] = static_cast<uint8_t>(h & 0xFFu);
  out[1] = static_cast<uint8_t>(h >> 8);
}

// quantize_row_q8_0_ref over one block of B values.
void q8_0_block(const float* x, int64_t B, uint8_t* out) {
  float amax = 0.0f;
  for (int64_t j = 0; j < B; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_scale(d, out);
  for (int64_t j = 0; j < B; ++j) {
    const float v = x[j] * id;
    const int8_t q = static_cast<int8_t>(std::round(v));  // |v| <= 127 (up to rounding)
    std::memcpy(out + 2 + j, &q, 1);
  }
}

// quantize_row_q4_0_ref over one block of B values: value j and j + B/2 share byte j.
void q4_0_block(const float* x, int64_t B, uint8_t* out) {
  float amax = 0.0f, max = 0.0f;
  for (int64_t j = 0; j < B; ++j) {
    const float v = x[j];
    if (amax < std::fabs(v)) {
      amax = std::fabs(v);
      max = v;
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_scale(d, out);
  const int64_t half = B / 2;
  for (int64_t j = 0; j < half; ++j) {
    const float x0 = x[j] * id;
    const float x1 = x[half + j] * id;
    const float s0 = x0 + 8.5f;
    const float s1 = x1 + 8.5f;
    // x * id lies in [-8, 8] (up to rounding), so s is in [0.5, 16.5] and the truncation is in
    // range.
    const uint8_t q0 =
        static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(s0))));
    const uint8_t q1 =
        static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(s1))));
    out[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

void quantize_block(GgmlType t, const float* x, int64_t B, uint8_t* out) {
  if (t == GgmlType::Q8_0)
    q8_0_block(x, B, out);
  else
    q4_0_block(x, B, out);
}

// Values [0, n) of one block of B values (n <= B).
void dequantize_block(GgmlType t, const uint8_t* b, int64_t B, int64_t n, float* dst) {
  const float d = fp16_to_fp32(static_cast<uint16_t>(b[0] | (b[1] << 8)));
  if (t == GgmlType::Q8_0) {
    for (int64_t j = 0; j < n; ++j) {
      int8_t q;
      std::memcpy(&q, b + 2 + j, 1);
      dst[j] = static_cast<float>(q) * d;
    }
  } else {
    const int64_t half = B / 2;
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t byte = b[2 + (j % half)];
      const int q = (j < half ? (byte & 0x0F) : (byte >> 4)) - 8;
      dst[j] = static_cast<float>(q) * d;
    }
  }
}

}  // namespace

int64_t ggml_block_bytes(GgmlType t) {
  return ggml_block_bytes(t, kGgmlBlockValues);
}

int64_t ggml_block_bytes(GgmlType t, int64_t block) {
  return 2 + (t == GgmlType::Q8_0 ? block : block / 2);
}

void ggml_quantize_row(GgmlType t, const float* x, int64_t k, uint8_t* out) {
  const int64_t nb = ggml_row_blocks(k);
  const int64_t bb = ggml_block_bytes(t);
  float pad[kGgmlBlockValues];
  for (int64_t i = 0; i < nb; ++i) {
    const float* src = x + i * kGgmlBlockValues;
    const int64_t left = k - i * kGgmlBlockValues;
    if (left < kGgmlBlockValues) {  // partial last block: zero padding
      std::fill(pad, pad + kGgmlBlockValues, 0.0f);
      std::copy(src, src + left, pad);
      src = pad;
    }
    quantize_block(t, src, kGgmlBlockValues, out + i * bb);
  }
}

void ggml_dequantize_row(GgmlType t, const uint8_t* in, int64_t k, float* y) {
  const int64_t nb = ggml_row_blocks(k);
  const int64_t bb = ggml_block_bytes(t);
  for (int64_t i = 0; i < nb; ++i)
    dequantize_block(t, in + i * bb, kGgmlBlockValues,
                     std::min<int64_t>(kGgmlBlockValues, k - i * kGgmlBlockValues),
                     y + i * kGgmlBlockValues);
}

void ggml_quantize_blocks(GgmlType t, int64_t block, const float* x, int64_t k, uint8_t* out) {
  const int64_t bb = ggml_block_bytes(t, block);
  for (int64_t i = 0; i < k / block; ++i) quantize_block(t, x + i * block, block, out + i * bb);
}

void ggml_dequantize_blocks(GgmlType t, int64_t block, const uint8_t* in, int64_t k, float* y) {
  const int64_t bb = ggml_block_bytes(t, block);
  for (int64_t i = 0; i < k / block; ++i)
    dequantize_block(t, in + i * bb, block, block, y + i * block);
}

}  // namespace vq::coding

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

void q8_0_block(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t h = fp32_to_fp16(d);
  out[0] = static_cast<uint8_t>(h & 0xFFu);
  out[1] = static_cast<uint8_t>(h >> 8);
  for (int j = 0; j < 32; ++j) {
    const float v = x[j] * id;
    const int8_t q = static_cast<int8_t>(std::round(v));  // |v| <= 127 (up to rounding)
    std::memcpy(out + 2 + j, &q, 1);
  }
}

void q4_0_block(const float* x, uint8_t* out) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float v = x[j];
    if (amax < std::fabs(v)) {
      amax = std::fabs(v);
      max = v;
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t h = fp32_to_fp16(d);
  out[0] = static_cast<uint8_t>(h & 0xFFu);
  out[1] = static_cast<uint8_t>(h >> 8);
  for (int j = 0; j < 16; ++j) {
    const float x0 = x[j] * id;
    const float x1 = x[16 + j] * id;
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

}  // namespace

int64_t ggml_block_bytes(GgmlType t) {
  return t == GgmlType::Q8_0 ? kQ8_0BlockBytes : kQ4_0BlockBytes;
}

void ggml_quantize_row(GgmlType t, const float* x, int64_t k, uint8_t* out) {
  const int64_t nb = ggml_row_blocks(k);
  const int64_t bb = ggml_block_bytes(t);
  float pad[32];
  for (int64_t i = 0; i < nb; ++i) {
    const float* src = x + i * 32;
    const int64_t left = k - i * 32;
    if (left < 32) {  // partial last block: zero padding
      std::fill(pad, pad + 32, 0.0f);
      std::copy(src, src + left, pad);
      src = pad;
    }
    if (t == GgmlType::Q8_0)
      q8_0_block(src, out + i * bb);
    else
      q4_0_block(src, out + i * bb);
  }
}

void ggml_dequantize_row(GgmlType t, const uint8_t* in, int64_t k, float* y) {
  const int64_t nb = ggml_row_blocks(k);
  const int64_t bb = ggml_block_bytes(t);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* b = in + i * bb;
    const float d = fp16_to_fp32(static_cast<uint16_t>(b[0] | (b[1] << 8)));
    const int64_t n = std::min<int64_t>(32, k - i * 32);
    float* dst = y + i * 32;
    if (t == GgmlType::Q8_0) {
      for (int64_t j = 0; j < n; ++j) {
        int8_t q;
        std::memcpy(&q, b + 2 + j, 1);
        dst[j] = static_cast<float>(q) * d;
      }
    } else {
      for (int64_t j = 0; j < n; ++j) {
        const uint8_t byte = b[2 + (j & 15)];
        const int q = (j < 16 ? (byte & 0x0F) : (byte >> 4)) - 8;
        dst[j] = static_cast<float>(q) * d;
      }
    }
  }
}

}  // namespace vq::coding

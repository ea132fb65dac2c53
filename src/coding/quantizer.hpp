// The affine min/max scalar quantizer KVTC applies to each surviving principal component.
//
// For b bits (1 <= b <= 8) over values x[0:n): levels = 2^b - 1, min = min(x),
// scale = max((max(x) - min) / levels, kMinScale), code = clamp(round((x - min) / scale), 0,
// levels), and the reconstruction is min + code * scale. min and scale are stored as fp32, so the
// encoder computes with exactly the fp32 values the decoder will read. A constant input has scale =
// kMinScale and reconstructs exactly to min.
#pragma once

#include <cstdint>

namespace vq::coding {

/// Floor of the step size: keeps 1 / scale finite for constant inputs.
constexpr float kMinScale = 1e-30f;
/// Largest bit width of the affine quantizer (codes fit in one byte).
constexpr int kMaxQuantBits = 8;

struct AffineParams {
  float min = 0;
  float scale = kMinScale;
};

/// 2^bits - 1.
inline int quant_levels(int bits) {
  return (1 << bits) - 1;
}

/// min/max over x[0:n) (n >= 1) turned into (min, scale) for `bits` bits.
AffineParams fit_affine(const float* x, int64_t n, int bits);

/// codes[i] = clamp(round((x[i] - p.min) / p.scale), 0, 2^bits - 1) for i < n.
void quantize_affine(const float* x, int64_t n, AffineParams p, int bits, uint8_t* codes);

/// out[i] = p.min + codes[i] * p.scale.
void dequantize_affine(const uint8_t* codes, int64_t n, AffineParams p, float* out);

/// Mean squared error of quantizing x[0:n) at `bits` bits with its own min/max (bits = 0 means
/// the component is dropped and reconstructed as 0, the mean of a centered component).
double affine_mse(const float* x, int64_t n, int bits);

}  // namespace vq::coding

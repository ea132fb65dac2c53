#include "coding/quantizer.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

namespace vq::coding {

AffineParams fit_affine(const float* x, int64_t n, int bits) {
  assert(n >= 1 && bits >= 1 && bits <= kMaxQuantBits);
  // 16 independent lanes (vectorizable); min/max of non-NaN values does not depend on the order,
  // except for which zero (+0 / -0) wins a tie, so a zero result is redone in order.
  float lo = x[0], hi = x[0];
  if (n >= 32) {
    float l16[16], h16[16];
    for (int j = 0; j < 16; ++j) l16[j] = h16[j] = x[j];
    int64_t i = 16;
    for (; i + 16 <= n; i += 16)
      for (int j = 0; j < 16; ++j) {
        l16[j] = x[i + j] < l16[j] ? x[i + j] : l16[j];
        h16[j] = x[i + j] > h16[j] ? x[i + j] : h16[j];
      }
    for (int j = 0; j < 16; ++j) {
      lo = std::min(lo, l16[j]);
      hi = std::max(hi, h16[j]);
    }
    for (; i < n; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
  }
  if (n < 32 || lo == 0.0f || hi == 0.0f) {
    lo = x[0];
    hi = x[0];
    for (int64_t i = 1; i < n; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
  }
  AffineParams p;
  p.min = lo;
  // The range is computed in double so that hi - lo cannot overflow fp32 for extreme inputs.
  const double step = (static_cast<double>(hi) - static_cast<double>(lo)) / quant_levels(bits);
  p.scale = std::max(static_cast<float>(step), kMinScale);
  return p;
}

void quantize_affine(const float* x, int64_t n, AffineParams p, int bits, uint8_t* codes) {
  const float inv = 1.0f / p.scale;
  const float top = static_cast<float>(quant_levels(bits));
  // code = clamp(floor(t), 0, top) with t = (x - min) / scale + 0.5. Clamping t to [0, top]
  // first gives the same codes (top is an integer and floor is monotonic), and on t >= 0 the
  // truncating conversion is floor: branch-free and vectorizable, codes unchanged.
  for (int64_t i = 0; i < n; ++i) {
    float t = (x[i] - p.min) * inv + 0.5f;
    t = t < 0.0f ? 0.0f : t;
    t = t > top ? top : t;
    codes[i] = static_cast<uint8_t>(static_cast<int32_t>(t));
  }
}

void dequantize_affine(const uint8_t* codes, int64_t n, AffineParams p, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = p.min + static_cast<float>(codes[i]) * p.scale;
}

double affine_mse(const float* x, int64_t n, int bits) {
  if (n <= 0) return 0.0;
  double err = 0;
  if (bits == 0) {
    for (int64_t i = 0; i < n; ++i) err += static_cast<double>(x[i]) * x[i];
    return err / static_cast<double>(n);
  }
  const AffineParams p = fit_affine(x, n, bits);
  std::vector<uint8_t> codes(static_cast<size_t>(n));
  std::vector<float> y(static_cast<size_t>(n));
  quantize_affine(x, n, p, bits, codes.data());
  dequantize_affine(codes.data(), n, p, y.data());
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - y[static_cast<size_t>(i)];
    err += d * d;
  }
  return err / static_cast<double>(n);
}

}  // namespace vq::coding

#include "veloxquant/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "veloxquant/errors.hpp"

namespace vq {

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24, exactly representable in fp32
      float f = std::ldexp(static_cast<float>(mant), -24);
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t fp32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7FFFFFFFu;
  if (absx >= 0x7F800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7C00u | (absx > 0x7F800000u ? 0x200u : 0u));
  }
  if (absx >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to inf
  if (absx < 0x38800000u) {  // below the smallest normal fp16 (2^-14): subnormal or zero
    // value in units of 2^-24, rounded to nearest even
    float a;
    std::memcpy(&a, &absx, 4);
    float scaled = a * 16777216.0f;    // exact (power of two scaling)
    float r = std::nearbyint(scaled);  // default rounding mode: nearest even
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));
  }
  // normal: rebias exponent, round mantissa from 23 to 10 bits, nearest even
  uint32_t mant = absx & 0x7FFFFFu;
  uint32_t exp = (absx >> 23) - 112u;
  uint32_t half = (exp << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half += 1;  // may carry into exponent
  return static_cast<uint16_t>(sign | half);
}

float bf16_to_fp32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t fp32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  const uint32_t lsb = (x >> 16) & 1u;
  x += 0x7FFFu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

std::string Shape4::str() const {
  return detail::cat("[", B, ", ", H, ", ", S, ", ", D, "]");
}

namespace {
size_t checked_numel(int64_t B, int64_t H, int64_t S, int64_t D) {
  VQ_CHECK(B >= 0 && H >= 0 && S >= 0 && D >= 0, InvalidArgument, "tensor shape [", B, ", ", H,
           ", ", S, ", ", D, "] has a negative dimension");
  const int64_t limit = int64_t{1} << 40;  // elements; far beyond any realistic cache
  int64_t n = 1;
  for (int64_t d : {B, H, S, D}) {
    if (d == 0) return 0;
    VQ_CHECK(n <= limit / d, InvalidArgument, "tensor shape [", B, ", ", H, ", ", S, ", ", D,
             "] has more than 2^40 elements");
    n *= d;
  }
  return static_cast<size_t>(n);
}
}  // namespace

Tensor::Tensor(int64_t B, int64_t H, int64_t S, int64_t D)
    : shape_{B, H, S, D}, data_(checked_numel(B, H, S, D), 0.0f) {}

Tensor Tensor::from_fp32(const float* data, int64_t B, int64_t H, int64_t S, int64_t D) {
  Tensor t(B, H, S, D);
  if (t.numel() > 0) std::memcpy(t.data(), data, sizeof(float) * static_cast<size_t>(t.numel()));
  return t;
}

Tensor Tensor::from_fp16(const uint16_t* data, int64_t B, int64_t H, int64_t S, int64_t D) {
  Tensor t(B, H, S, D);
  const size_t n = static_cast<size_t>(t.numel());
  for (size_t i = 0; i < n; ++i) t.data_[i] = fp16_to_fp32(data[i]);
  return t;
}

std::vector<uint16_t> Tensor::to_fp16() const {
  std::vector<uint16_t> out(data_.size());
  for (size_t i = 0; i < data_.size(); ++i) out[i] = fp32_to_fp16(data_[i]);
  return out;
}

bool Tensor::all_finite() const {
  bool ok = true;
  for (float x : data_) ok &= std::isfinite(x);
  return ok;
}

void Tensor::check_finite(const std::string& what) const {
  for (size_t i = 0; i < data_.size(); ++i) {
    if (!std::isfinite(data_[i])) {
      const int64_t D = shape_.D, S = shape_.S, H = shape_.H;
      const int64_t idx = static_cast<int64_t>(i);
      VQ_THROW(InvalidArgument, what, " contains a non-finite value (", data_[i],
               ") at [b=", idx / (H * S * D), ", h=", (idx / (S * D)) % H, ", s=", (idx / D) % S,
               ", d=", idx % D, "]; every element must be finite");
    }
  }
}

bool Tensor::all_within(double max_abs) const {
  const auto lim = static_cast<float>(std::min<double>(max_abs, std::numeric_limits<float>::max()));
  bool ok = true;
  for (float x : data_) ok &= std::fabs(x) <= lim;  // false for NaN and +-inf too
  return ok;
}

void Tensor::check_within(const std::string& what, double max_abs,
                          const std::string& limit_what) const {
  check_finite(what);
  const auto lim = static_cast<float>(std::min<double>(max_abs, std::numeric_limits<float>::max()));
  for (size_t i = 0; i < data_.size(); ++i) {
    if (!(std::fabs(data_[i]) <= lim)) {
      const int64_t D = shape_.D, S = shape_.S, H = shape_.H;
      const int64_t idx = static_cast<int64_t>(i);
      VQ_THROW(InvalidArgument, what, " contains ", data_[i], " at [b=", idx / (H * S * D),
               ", h=", (idx / (S * D)) % H, ", s=", (idx / D) % S, ", d=", idx % D, "], beyond +-",
               max_abs, ", the largest magnitude this cache can hold (", limit_what, ")");
    }
  }
}

Tensor Tensor::slice_tokens(int64_t s0, int64_t n) const {
  VQ_CHECK(s0 >= 0 && n >= 0 && s0 + n <= shape_.S, InvalidArgument, "token slice [", s0, ", ",
           s0 + n, ") is outside [0, ", shape_.S, ")");
  Tensor out(shape_.B, shape_.H, n, shape_.D);
  for (int64_t b = 0; b < shape_.B; ++b)
    for (int64_t h = 0; h < shape_.H; ++h)
      if (n > 0)
        std::memcpy(out.row(b, h, 0), row(b, h, s0),
                    sizeof(float) * static_cast<size_t>(n * shape_.D));
  return out;
}

}  // namespace vq

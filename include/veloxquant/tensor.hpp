// A small owning tensor of shape [B, H, S, D] (batch, heads, tokens, head_dim), fp32 row-major.
// fp16 input is accepted and widened exactly; fp16 output rounds to nearest-even.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vq {

/// IEEE binary16 <-> binary32. fp16_to_fp32 is exact; fp32_to_fp16 rounds to nearest, ties to
/// even, overflows to +-inf, keeps NaN a NaN. fp32 -> fp16 -> fp32 is the identity for every
/// value representable in fp16.
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
/// Round a float through fp16 and back (what storing it as fp16 would keep).
inline float round_to_fp16(float f) {
  return fp16_to_fp32(fp32_to_fp16(f));
}

/// bfloat16 helpers (upper 16 bits of a float, round to nearest even).
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

struct Shape4 {
  int64_t B = 0, H = 0, S = 0, D = 0;
  int64_t numel() const { return B * H * S * D; }
  bool operator==(const Shape4&) const = default;
  std::string str() const;  ///< "[B, H, S, D]"
};

/// Owning fp32 tensor [B, H, S, D], contiguous, D fastest.
class Tensor {
 public:
  Tensor() = default;
  /// Zero-filled. Every dimension must be >= 0 and the element count must fit in memory limits.
  Tensor(int64_t B, int64_t H, int64_t S, int64_t D);
  explicit Tensor(Shape4 shape) : Tensor(shape.B, shape.H, shape.S, shape.D) {}

  /// Copy `B*H*S*D` floats from `data` (row-major [B, H, S, D]).
  static Tensor from_fp32(const float* data, int64_t B, int64_t H, int64_t S, int64_t D);
  /// Widen `B*H*S*D` fp16 bit patterns from `data`.
  static Tensor from_fp16(const uint16_t* data, int64_t B, int64_t H, int64_t S, int64_t D);

  const Shape4& shape() const { return shape_; }
  int64_t B() const { return shape_.B; }
  int64_t H() const { return shape_.H; }
  int64_t S() const { return shape_.S; }
  int64_t D() const { return shape_.D; }
  int64_t numel() const { return shape_.numel(); }
  bool empty() const { return numel() == 0; }

  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  /// Pointer to the D floats of token s of head h in batch b.
  float* row(int64_t b, int64_t h, int64_t s) { return data_.data() + offset(b, h, s); }
  const float* row(int64_t b, int64_t h, int64_t s) const { return data_.data() + offset(b, h, s); }
  /// Pointer to the [S, D] block of head h in batch b.
  float* head(int64_t b, int64_t h) { return row(b, h, 0); }
  const float* head(int64_t b, int64_t h) const { return row(b, h, 0); }
  float& at(int64_t b, int64_t h, int64_t s, int64_t d) { return data_[offset(b, h, s) + d]; }
  float at(int64_t b, int64_t h, int64_t s, int64_t d) const { return data_[offset(b, h, s) + d]; }

  /// fp16 bit patterns of every element (round to nearest even).
  std::vector<uint16_t> to_fp16() const;

  /// True when every element is finite (no allocation).
  bool all_finite() const;
  /// Throws InvalidArgument naming `what`, the index and the value of the first NaN/Inf.
  void check_finite(const std::string& what) const;
  /// True when every element is finite with |x| <= max_abs (no allocation).
  bool all_within(double max_abs) const;
  /// check_finite(what), then throws InvalidArgument naming `what`, the index and the value of
  /// the first element with |x| > max_abs, and the limit with `limit_what` (what sets it).
  void check_within(const std::string& what, double max_abs, const std::string& limit_what) const;

  /// Tokens [s0, s0+n) of every head, as a new tensor [B, H, n, D].
  Tensor slice_tokens(int64_t s0, int64_t n) const;

 private:
  size_t offset(int64_t b, int64_t h, int64_t s) const {
    return static_cast<size_t>(((b * shape_.H + h) * shape_.S + s) * shape_.D);
  }
  Shape4 shape_{};
  std::vector<float> data_;
};

}  // namespace vq

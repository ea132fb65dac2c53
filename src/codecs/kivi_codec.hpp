// KIVI's resident form: chunks of `group` tokens (chunk_rows = group), the newest `residual`
// tokens waiting at fp16 in the store's window (recent_rows = residual), exactly when the
// existing kivi cache quantizes (a group is formed once residual + group tokens are unquantized).
//
//   keys (per channel over the chunk): chunk params = D x (f32 min, f32 scale), channel order;
//        row = D codes packed at `bits` bits (ceil(D * bits / 8) bytes).
//   values (per token, groups of `group` channels): no chunk params; row = ceil(D / group) x
//        (f32 min, f32 scale), then the D codes packed at `bits` bits.
// Rows are rounded to fp16 before quantization (KIVI quantizes an fp16 cache), and the
// quantizer is coding/quantizer.hpp's affine min/max, so for the same chunk the decoded floats
// are exactly those transform::KiviRowCoder decodes from its Huffman-coded bytes.
#pragma once

#include <memory>

#include "store/row_codec.hpp"

namespace vq::codecs {

class KiviCodec final : public store::RowCodec {
 public:
  KiviCodec(int64_t dim, bool keys, int bits, int64_t group, int64_t residual);

  int64_t chunk_rows() const override { return group_; }
  int64_t recent_rows() const override { return residual_; }
  int64_t row_bytes() const override;
  int64_t chunk_param_bytes(int64_t n) const override;
  void encode(const float* rows, int64_t n, uint8_t* params, uint8_t* codes) override;
  void decode(const uint8_t* params, const uint8_t* codes, int64_t n, float* out) const override;
  /// Scores on the packed codes: keys fold each channel's scale into the query once per call
  /// (row . q = sum_c min_c q_c + sum_c code_c (scale_c q_c)); values use per-group sums of q
  /// (sum_g min_g sum_{c in g} q_c + scale_g sum_{c in g} code_c q_c). The base class's
  /// dot_rows (decode, then the fp32 kernel) is the reference twin.
  void dot_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* q,
                float* out) const override;
  /// acc[c] += w_i * (min + code * scale), each row unpacked and added without a decoded copy.
  void axpy_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                 float* acc) const override;
  /// The Huffman-coded size transform::KiviRowCoder gives the same chunk.
  int64_t stored_chunk_bytes(const uint8_t* params, const uint8_t* codes, int64_t n) const override;

 private:
  int64_t groups() const { return (dim() + group_ - 1) / group_; }
  int64_t code_bytes() const { return (dim() * bits_ + 7) / 8; }
  bool keys_;
  int bits_;
  int64_t group_, residual_;
};

std::unique_ptr<store::RowCodec> make_kivi_row_codec(const CacheConfig& c,
                                                     const store::StreamInfo& s);

}  // namespace vq::codecs

// GEAR's resident form: every row decodes on its own given its chunk's shared low-rank factor.
//
// Per chunk of n <= chunk_tokens rows, with r = min(rank, D) and m = min(D, round(ratio * D)):
//   1. each row's m largest-magnitude entries (ties to the lower index) are its outliers, kept as
//      (u16 index, fp16 value) and zeroed in the row's dense part;
//   2. the dense part is quantized per row at `bits` bits (affine min/max, coding/quantizer.hpp);
//   3. the quantization residual of the chunk is approximated by its best rank-k factorization
//      A B (truncated SVD, k = min(rank, n, D)); B [k, D] is the chunk's parameter and row t keeps
//      its row of A.
// Layout:
//   chunk params: B as r x D fp16 values (2 r D bytes; rows past k are zero);
//   row: f32 min, f32 scale, m x (u16 index, fp16 value) ascending index, r x fp16 A (zero past
//        k), then the D codes packed at `bits` bits:
//        8 + 4 m + 2 r + ceil(D * bits / 8) bytes.
// A row decodes to min + code * scale + sum_j A_j B_j (in that order, fp32), then its outliers.
//
// How this differs from transform::GearRowCoder (the storage coder): that one picks the
// round(ratio * n * D) largest entries of the whole chunk (so a row may hold many outliers or
// none) and stores them as a varint-delta list, Huffman-codes the codes and stores A as one
// [n, k] block. Here every row has exactly m outliers at a fixed place, so rows have one width
// and can be dropped or read alone; on inputs whose outliers cluster in few rows this keeps
// fewer of them than the chunk-wide selection. stored_chunk_bytes() is the resident size.
#pragma once

#include <memory>

#include "store/row_codec.hpp"

namespace vq::codecs {

class GearCodec final : public store::RowCodec {
 public:
  GearCodec(int64_t dim, int bits, int64_t rank, double ratio, int64_t chunk, int64_t fit);

  int64_t chunk_rows() const override { return chunk_; }
  /// GEAR fits nothing, but its first fit_tokens rows are encoded at once (as the existing
  /// cache does), so it keeps the fit geometry; fit() only marks it fitted.
  int64_t fit_rows() const override { return fit_; }
  void fit(const float*, int64_t) override { fitted_ = true; }
  bool fitted() const override { return fitted_; }

  int64_t row_bytes() const override { return 8 + 4 * outliers_ + 2 * r_ + code_bytes(); }
  int64_t chunk_param_bytes(int64_t) const override { return 2 * r_ * dim(); }
  void encode(const float* rows, int64_t n, uint8_t* params, uint8_t* codes) override;
  void decode(const uint8_t* params, const uint8_t* codes, int64_t n, float* out) const override;

  int64_t outliers_per_row() const { return outliers_; }
  int64_t rank() const { return r_; }

 private:
  int64_t code_bytes() const { return (dim() * bits_ + 7) / 8; }
  int bits_;
  int64_t r_, outliers_, chunk_, fit_;
  bool fitted_ = false;
};

std::unique_ptr<store::RowCodec> make_gear_row_codec(const CacheConfig& c,
                                                     const store::StreamInfo& s);

}  // namespace vq::codecs

// Resident q8_0 / q4_0 rows laid out as llama.cpp lays out its quantized KV cache: a row is one
// head's D values, cut into D / block blocks that never cross a head boundary.
//
// block = 32 is llama.cpp's own format, byte for byte (coding/ggml_blocks.hpp): a q8_0 block is
// an fp16 scale and 32 int8 quants (34 bytes), a q4_0 block an fp16 scale and 16 bytes of nibbles
// (18 bytes). block = 16 and block = 8 are VeloxQuant variants (not llama.cpp formats) with the
// same formulas and one fp16 scale per 16 / 8 values: q8_0 blocks of 2 + block bytes, q4_0 blocks
// of 2 + block / 2 bytes whose byte j holds value j (low nibble) and value j + block / 2 (high
// nibble). Every block size must divide head_dim: llama.cpp refuses a head_dim that is not a
// multiple of 32, and so does block = 32 here.
//
// quant_q = true rounds each query to q8_0 blocks (of `block` values) for the K.Q product over
// this key stream, as llama.cpp's CPU path does when K is quantized (its vec_dot_type of q8_0 and
// q4_0 is q8_0): dot_rows quantizes the query and multiplies int8 by int8 per block. The codec
// also reports it (quantizes_queries()) so that attention rounds the query the same way for rows
// it holds outside the store (a prefill chunk's own rows).
#pragma once

#include <memory>
#include <vector>

#include "coding/ggml_blocks.hpp"
#include "store/row_codec.hpp"
#include "veloxquant/registry.hpp"

namespace vq::codecs {

class GgmlCodec final : public store::RowCodec {
 public:
  /// Throws InvalidArgument when block does not divide dim (naming both) or block is not one of
  /// 8, 16, 32. `keys`: the stream holds keys (only a key stream asks for query rounding).
  GgmlCodec(coding::GgmlType type, int64_t dim, int64_t block, bool quant_q, bool keys);

  int64_t row_bytes() const override {
    return dim() / block_ * coding::ggml_block_bytes(type_, block_);
  }
  /// Each block's fp16 scale, max|x| / 127 (q8_0) or max|x| / 8 (q4_0), must stay finite.
  ValueRange value_range() const override {
    return type_ == coding::GgmlType::Q8_0
               ? ValueRange{65504.0 * 127.0, "an fp16 block scale of max|x| / 127"}
               : ValueRange{65504.0 * 8.0, "an fp16 block scale of max|x| / 8"};
  }
  void encode(const float* rows, int64_t n, uint8_t* params, uint8_t* codes) override;
  void decode(const uint8_t* params, const uint8_t* codes, int64_t n, float* out) const override;
  /// On the blocks (coding/ggml_dot.hpp); with quant_q on a key stream, the query is rounded to
  /// q8_0 blocks of `block` values and each block's product is an integer dot (llama.cpp's).
  void dot_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* q,
                float* out) const override;
  void axpy_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                 float* acc) const override;
  void dot_rows_many(const uint8_t* params, const uint8_t* codes, int64_t n, const float* qs,
                     int64_t nq, float* out, int64_t out_stride) const override;
  void axpy_rows_many(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                      int64_t w_stride, int64_t nw, float* acc) const override;
  bool quantizes_queries() const override { return quant_q_ && keys_; }
  int64_t query_block() const override { return block_; }

  coding::GgmlType type() const { return type_; }
  int64_t block() const { return block_; }

 private:
  coding::GgmlType type_;
  int64_t block_;
  bool quant_q_, keys_;
};

/// Throws InvalidArgument unless block is 8, 16 or 32 and divides dim (head_dim), with a message
/// that says why blocks must lie inside a head.
void check_ggml_geometry(coding::GgmlType type, int64_t dim, int64_t block);
/// The options q8_0 and q4_0 take: block (32 | 16 | 8) and quant_q.
std::vector<OptionSpec> ggml_codec_options();
/// The codec of one stream of a q8_0 / q4_0 cache.
std::unique_ptr<store::RowCodec> make_ggml_row_codec(coding::GgmlType type, const CacheConfig& c,
                                                     const store::StreamInfo& s);

}  // namespace vq::codecs

// Row coder for llama.cpp's q8_0 / q4_0 KV-cache blocks (coding/ggml_blocks.hpp). A row is one
// token's keys (or values) of one head, W = D values, cut into W / block blocks (block 32 is
// llama.cpp's format; 16 and 8 the VeloxQuant variants, as in the cache's GgmlCodec). Nothing is
// fitted and there is no header; each chunk is one row. Block scales count as params, quants as
// payload.
//
// block = 0 is the layout of .vqkv version 1, kept only to read such files: a row is a token's
// values across all heads (W = H * D) in ceil(W / 32) ggml blocks, so one scale spans heads.
#pragma once

#include "coding/ggml_blocks.hpp"
#include "transform/row_coder.hpp"

namespace vq::transform {

class GgmlRowCoder final : public RowCoder {
 public:
  /// block: 32, 16 or 8 (must divide width), or 0 for the version-1 row layout.
  GgmlRowCoder(coding::GgmlType type, int64_t width, int64_t block);

  bool needs_fit() const override { return false; }
  void fit(const float*, int64_t, EncodedSection&) override {}
  void read_header(coding::ByteReader&) override {}
  /// Appends n rows (n separate one-row chunks, which have no framing of their own).
  void encode_chunk(const float* rows, int64_t n, EncodedSection& sec) override;
  /// Reads exactly one row.
  int64_t decode_chunk(coding::ByteReader& in, int64_t max_rows, float* rows) override;

  coding::GgmlType type() const { return type_; }
  int64_t row_bytes() const;
  int64_t row_blocks() const;

 private:
  coding::GgmlType type_;
  int64_t block_;
};

}  // namespace vq::transform

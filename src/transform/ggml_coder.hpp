// Row coder for llama.cpp's q8_0 / q4_0 KV-cache blocks (coding/ggml_blocks.hpp). A row is one
// token's keys (or values) across all KV heads of the layer, W = H * D values, as llama.cpp lays
// out its K/V cache rows. Nothing is fitted and there is no header; each chunk is one row of
// ceil(W / 32) blocks. Block scales count as params, quants as payload.
#pragma once

#include "coding/ggml_blocks.hpp"
#include "transform/row_coder.hpp"

namespace vq::transform {

class GgmlRowCoder final : public RowCoder {
 public:
  GgmlRowCoder(coding::GgmlType type, int64_t width) : RowCoder(width), type_(type) {}

  bool needs_fit() const override { return false; }
  void fit(const float*, int64_t, EncodedSection&) override {}
  void read_header(coding::ByteReader&) override {}
  /// Appends n rows (n separate one-row chunks, which have no framing of their own).
  void encode_chunk(const float* rows, int64_t n, EncodedSection& sec) override;
  /// Reads exactly one row.
  int64_t decode_chunk(coding::ByteReader& in, int64_t max_rows, float* rows) override;

  coding::GgmlType type() const { return type_; }
  int64_t row_bytes() const { return coding::ggml_row_bytes(type_, width()); }

 private:
  coding::GgmlType type_;
};

}  // namespace vq::transform

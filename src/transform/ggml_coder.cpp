#include "transform/ggml_coder.hpp"

#include <cmath>

#include "veloxquant/errors.hpp"

namespace vq::transform {

GgmlRowCoder::GgmlRowCoder(coding::GgmlType type, int64_t width, int64_t block)
    : RowCoder(width), type_(type), block_(block) {
  VQ_CHECK(block == 0 || ((block == 32 || block == 16 || block == 8) && width % block == 0),
           InvalidArgument, "ggml row coder: block = ", block, " must be 32, 16 or 8 and divide ",
           "the row width ", width);
}

int64_t GgmlRowCoder::row_blocks() const {
  return block_ == 0 ? coding::ggml_row_blocks(width()) : width() / block_;
}

int64_t GgmlRowCoder::row_bytes() const {
  return block_ == 0 ? coding::ggml_row_bytes(type_, width())
                     : row_blocks() * coding::ggml_block_bytes(type_, block_);
}

void GgmlRowCoder::encode_chunk(const float* rows, int64_t n, EncodedSection& sec) {
  const int64_t W = width(), rb = row_bytes();
  const int64_t blocks = row_blocks();
  auto& out = sec.bytes;
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(n * rb));
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* dst = out.data() + at + static_cast<size_t>(i * rb);
    if (block_ == 0)
      coding::ggml_quantize_row(type_, rows + i * W, W, dst);
    else
      coding::ggml_quantize_blocks(type_, block_, rows + i * W, W, dst);
  }
  sec.breakdown.params += n * blocks * 2;
  sec.breakdown.payload += n * (rb - blocks * 2);
  sec.fixed_width_payload += n * (rb - blocks * 2);
}

int64_t GgmlRowCoder::decode_chunk(coding::ByteReader& in, int64_t max_rows, float* rows) {
  VQ_CHECK(max_rows >= 1, FormatError, "ggml section: no rows left to decode");
  const int64_t W = width(), rb = row_bytes();
  in.need(static_cast<size_t>(rb), "ggml block row");
  if (block_ == 0)
    coding::ggml_dequantize_row(type_, in.cursor(), W, rows);
  else
    coding::ggml_dequantize_blocks(type_, block_, in.cursor(), W, rows);
  for (int64_t i = 0; i < W; ++i)
    VQ_CHECK(std::isfinite(rows[i]), FormatError, "ggml block row: value ", i,
             " decodes to NaN/Inf (corrupt fp16 scale)");
  in.skip(static_cast<size_t>(rb), "ggml block row");
  return 1;
}

}  // namespace vq::transform

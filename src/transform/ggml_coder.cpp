#include "transform/ggml_coder.hpp"

#include <cmath>

#include "veloxquant/errors.hpp"

namespace vq::transform {

void GgmlRowCoder::encode_chunk(const float* rows, int64_t n, EncodedSection& sec) {
  const int64_t W = width(), rb = row_bytes();
  const int64_t blocks = coding::ggml_row_blocks(W);
  auto& out = sec.bytes;
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(n * rb));
  for (int64_t i = 0; i < n; ++i)
    coding::ggml_quantize_row(type_, rows + i * W, W,
                              out.data() + at + static_cast<size_t>(i * rb));
  sec.breakdown.params += n * blocks * 2;
  sec.breakdown.payload += n * (rb - blocks * 2);
  sec.fixed_width_payload += n * (rb - blocks * 2);
}

int64_t GgmlRowCoder::decode_chunk(coding::ByteReader& in, int64_t max_rows, float* rows) {
  VQ_CHECK(max_rows >= 1, FormatError, "ggml section: no rows left to decode");
  const int64_t W = width(), rb = row_bytes();
  in.need(static_cast<size_t>(rb), "ggml block row");
  coding::ggml_dequantize_row(type_, in.cursor(), W, rows);
  for (int64_t i = 0; i < W; ++i)
    VQ_CHECK(std::isfinite(rows[i]), FormatError, "ggml block row: value ", i,
             " decodes to NaN/Inf (corrupt fp16 scale)");
  in.skip(static_cast<size_t>(rb), "ggml block row");
  return 1;
}

}  // namespace vq::transform

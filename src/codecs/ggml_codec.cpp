#include "codecs/ggml_codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "coding/ggml_dot.hpp"
#include "core/options.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/tensor.hpp"

namespace vq::codecs {

namespace {

const char* type_name(coding::GgmlType t) {
  return t == coding::GgmlType::Q8_0 ? "q8_0" : "q4_0";
}

}  // namespace

void check_ggml_geometry(coding::GgmlType type, int64_t dim, int64_t block) {
  VQ_CHECK(block == 32 || block == 16 || block == 8, InvalidArgument, type_name(type),
           ": block = ", block, " is not supported; allowed 32 (llama.cpp), 16 or 8");
  VQ_CHECK(dim >= 1, InvalidArgument, type_name(type), ": head_dim = ", dim, " must be >= 1");
  if (block == 32) {
    VQ_CHECK(dim % 32 == 0, InvalidArgument, type_name(type), ": head_dim = ", dim,
             " is not a multiple of 32. llama.cpp's ", type_name(type),
             " blocks of 32 values lie inside one head, so it refuses such a head_dim; use the "
             "VeloxQuant variants block=16 or block=8 (one fp16 scale per 16 / 8 values) if "
             "head_dim is a multiple of them");
  } else {
    VQ_CHECK(dim % block == 0, InvalidArgument, type_name(type), ": head_dim = ", dim,
             " is not a multiple of block = ", block,
             "; blocks lie inside one head, so block must divide head_dim",
             dim % 8 == 0 ? " (block=8 does)" : " (no supported block size 8, 16, 32 does)");
  }
}

GgmlCodec::GgmlCodec(coding::GgmlType type, int64_t dim, int64_t block, bool quant_q, bool keys)
    : RowCodec(dim), type_(type), block_(block), quant_q_(quant_q), keys_(keys) {
  check_ggml_geometry(type, dim, block);
}

void GgmlCodec::encode(const float* rows, int64_t n, uint8_t*, uint8_t* codes) {
  const int64_t D = dim(), rb = row_bytes();
  // Blocks never cross a row (a head): at block 32, ggml's own bytes for each row.
  for (int64_t i = 0; i < n; ++i)
    coding::ggml_quantize_blocks(type_, block_, rows + i * D, D, codes + i * rb);
}

void GgmlCodec::decode(const uint8_t*, const uint8_t* codes, int64_t n, float* out) const {
  const int64_t D = dim(), rb = row_bytes();
  for (int64_t i = 0; i < n; ++i)
    coding::ggml_dequantize_blocks(type_, block_, codes + i * rb, D, out + i * D);
}

void GgmlCodec::dot_rows(const uint8_t*, const uint8_t* codes, int64_t n, const float* q,
                         float* out) const {
  const int64_t D = dim(), rb = row_bytes();
  if (n <= 0) return;
  if (!quantizes_queries()) {
    coding::ggml_dot_rows(type_, block_, codes, rb, n, D, q, out);
    return;
  }
  thread_local std::vector<uint8_t> q8;  // the query as q8_0 blocks (D / block blocks)
  q8.resize(
      static_cast<size_t>(D / block_ * coding::ggml_block_bytes(coding::GgmlType::Q8_0, block_)));
  coding::ggml_quantize_blocks(coding::GgmlType::Q8_0, block_, q, D, q8.data());
  coding::ggml_dot_rows_q8(type_, block_, codes, rb, n, D, q8.data(), out);
}

void GgmlCodec::axpy_rows(const uint8_t*, const uint8_t* codes, int64_t n, const float* w,
                          float* acc) const {
  coding::ggml_axpy_rows(type_, block_, codes, row_bytes(), n, dim(), w, acc);
}

void GgmlCodec::dot_rows_many(const uint8_t* params, const uint8_t* codes, int64_t n,
                              const float* qs, int64_t nq, float* out, int64_t out_stride) const {
  if (n <= 0) return;
  if (quantizes_queries()) {  // each query rounded on its own, as dot_rows does
    RowCodec::dot_rows_many(params, codes, n, qs, nq, out, out_stride);
    return;
  }
  coding::ggml_dot_rows_many(type_, block_, codes, row_bytes(), n, dim(), qs, nq, out, out_stride);
}

void GgmlCodec::axpy_rows_many(const uint8_t*, const uint8_t* codes, int64_t n, const float* w,
                               int64_t w_stride, int64_t nw, float* acc) const {
  coding::ggml_axpy_rows_many(type_, block_, codes, row_bytes(), n, dim(), w, w_stride, nw, acc);
}

std::vector<OptionSpec> ggml_codec_options() {
  return {
      opt_choice("block", "32", {"32", "16", "8"},
                 "values per block, blocks inside one head: 32 = llama.cpp's format (head_dim "
                 "must be a multiple of 32); 16 and 8 are VeloxQuant variants with one fp16 scale "
                 "per 16 / 8 values"),
      opt_bool("quant_q", false,
               "round each query to q8_0 blocks for the K.Q product, as llama.cpp does over a "
               "quantized K cache"),
  };
}

std::unique_ptr<store::RowCodec> make_ggml_row_codec(coding::GgmlType type, const CacheConfig& c,
                                                     const store::StreamInfo& s) {
  const int64_t block = std::stoll(c.get_string("block"));
  return std::make_unique<GgmlCodec>(type, s.head_dim, block, c.get_bool("quant_q"), s.kv == 0);
}

}  // namespace vq::codecs

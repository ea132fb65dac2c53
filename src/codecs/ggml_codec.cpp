// ggml's reference quantizers round every product and sum on its own; keep the compiler from
// fusing them so that the generalized blocks equal ggml's bytes (see coding/ggml_blocks.cpp).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "codecs/ggml_codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/options.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/tensor.hpp"

namespace vq::codecs {

namespace {

const char* type_name(coding::GgmlType t) {
  return t == coding::GgmlType::Q8_0 ? "q8_0" : "q4_0";
}

void put_scale(float d, uint8_t* out) {
  const uint16_t h = fp32_to_fp16(d);
  out[0] = static_cast<uint8_t>(h & 0xFFu);
  out[1] = static_cast<uint8_t>(h >> 8);
}

// quantize_row_q8_0_ref over `B` values.
void q8_0_block(const float* x, int64_t B, uint8_t* out) {
  float amax = 0.0f;
  for (int64_t j = 0; j < B; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_scale(d, out);
  for (int64_t j = 0; j < B; ++j) {
    const int8_t q = static_cast<int8_t>(std::round(x[j] * id));
    std::memcpy(out + 2 + j, &q, 1);
  }
}

// quantize_row_q4_0_ref over `B` values: value j and j + B/2 share byte j.
void q4_0_block(const float* x, int64_t B, uint8_t* out) {
  float amax = 0.0f, max = 0.0f;
  for (int64_t j = 0; j < B; ++j) {
    const float v = x[j];
    if (amax < std::fabs(v)) {
      amax = std::fabs(v);
      max = v;
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_scale(d, out);
  const int64_t half = B / 2;
  for (int64_t j = 0; j < half; ++j) {
    const float s0 = x[j] * id + 8.5f;
    const float s1 = x[half + j] * id + 8.5f;
    const uint8_t q0 =
        static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(s0))));
    const uint8_t q1 =
        static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(s1))));
    out[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

}  // namespace

int64_t ggml_block_bytes(coding::GgmlType t, int64_t block) {
  return 2 + (t == coding::GgmlType::Q8_0 ? block : block / 2);
}

void ggml_quantize_blocks(coding::GgmlType t, int64_t block, const float* x, int64_t k,
                          uint8_t* out) {
  const int64_t bb = ggml_block_bytes(t, block);
  for (int64_t i = 0; i < k / block; ++i) {
    if (t == coding::GgmlType::Q8_0)
      q8_0_block(x + i * block, block, out + i * bb);
    else
      q4_0_block(x + i * block, block, out + i * bb);
  }
}

void ggml_dequantize_blocks(coding::GgmlType t, int64_t block, const uint8_t* in, int64_t k,
                            float* y) {
  const int64_t bb = ggml_block_bytes(t, block);
  const int64_t half = block / 2;
  for (int64_t i = 0; i < k / block; ++i) {
    const uint8_t* b = in + i * bb;
    const float d = fp16_to_fp32(static_cast<uint16_t>(b[0] | (b[1] << 8)));
    float* dst = y + i * block;
    if (t == coding::GgmlType::Q8_0) {
      for (int64_t j = 0; j < block; ++j)
        dst[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
    } else {
      for (int64_t j = 0; j < half; ++j) {
        dst[j] = static_cast<float>((b[2 + j] & 0x0F) - 8) * d;
        dst[half + j] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
      }
    }
  }
}

GgmlCodec::GgmlCodec(coding::GgmlType type, int64_t dim, int64_t block, bool quant_q, bool keys)
    : RowCodec(dim), type_(type), block_(block), quant_q_(quant_q), keys_(keys) {
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

void GgmlCodec::encode(const float* rows, int64_t n, uint8_t*, uint8_t* codes) {
  const int64_t D = dim(), rb = row_bytes();
  for (int64_t i = 0; i < n; ++i) {
    if (block_ == 32)  // llama.cpp's own layout: ggml's reference quantizer itself
      coding::ggml_quantize_row(type_, rows + i * D, D, codes + i * rb);
    else
      ggml_quantize_blocks(type_, block_, rows + i * D, D, codes + i * rb);
  }
}

void GgmlCodec::decode(const uint8_t*, const uint8_t* codes, int64_t n, float* out) const {
  const int64_t D = dim(), rb = row_bytes();
  for (int64_t i = 0; i < n; ++i)
    ggml_dequantize_blocks(type_, block_, codes + i * rb, D, out + i * D);
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

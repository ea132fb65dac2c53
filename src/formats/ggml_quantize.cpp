// fp32 -> ggml block types, for weights made in memory (Model::random_typed) and tests. The
// layouts are the ones ggml_types.cpp decodes; the fits are plain and deterministic:
//   F16 / BF16  round to nearest, ties to even (BF16 keeps NaN a quiet NaN).
//   Q8_0        d = amax / 127, q = round(x * (1 / d)) with the fp32 d, d stored as fp16: the
//               bytes of coding/ggml_blocks' (ggml's reference) quantizer.
//   Q4_K        per 32-value sub-block: lo = min(0, min x), hi = max x, step = (hi - lo) / 15;
//               the super-block's d = max step / 63 and dmin = max(-lo) / 63 (fp16), each
//               sub-block's 6-bit scale round(step / d) and min round(-lo / dmin); then
//               q = clamp(round((x + dmin * mn) / (d * sc)), 0, 15) with the stored values.
#include <cmath>
#include <cstring>

#include "veloxquant/errors.hpp"
#include "veloxquant/gguf.hpp"
#include "veloxquant/tensor.hpp"

namespace vq {
namespace {

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFF);
  p[1] = static_cast<uint8_t>(v >> 8);
}

uint16_t to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  if (std::isnan(f)) return static_cast<uint16_t>((b >> 16) | 0x40);
  b += 0x7FFF + ((b >> 16) & 1);  // round to nearest, ties to even
  return static_cast<uint16_t>(b >> 16);
}

int clamp_round(float x, int lo, int hi) {
  const long r = std::lround(x);
  return static_cast<int>(r < lo ? lo : (r > hi ? hi : r));
}

void q8_0_block(const float* x, uint8_t* out) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;  // the quants use the fp32 scale; only the stored one is fp16
  const float inv = d > 0 ? 1.0f / d : 0.0f;
  put16(out, fp32_to_fp16(d));
  for (int j = 0; j < 32; ++j)
    out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(clamp_round(x[j] * inv, -127, 127)));
}

void q4_k_block(const float* x, uint8_t* out) {
  float step[8], neg_lo[8];
  float max_step = 0, max_neg = 0;
  for (int s = 0; s < 8; ++s) {
    float lo = 0, hi = x[32 * s];
    for (int j = 0; j < 32; ++j) {
      lo = std::fmin(lo, x[32 * s + j]);
      hi = std::fmax(hi, x[32 * s + j]);
    }
    step[s] = std::fmax(hi - lo, 0.0f) / 15.0f;
    neg_lo[s] = -lo;
    max_step = std::fmax(max_step, step[s]);
    max_neg = std::fmax(max_neg, neg_lo[s]);
  }
  const uint16_t dh = fp32_to_fp16(max_step / 63.0f), mh = fp32_to_fp16(max_neg / 63.0f);
  put16(out, dh);
  put16(out + 2, mh);
  const float d = fp16_to_fp32(dh), dmin = fp16_to_fp32(mh);
  int sc[8], mn[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = d > 0 ? clamp_round(step[s] / d, 0, 63) : 0;
    mn[s] = dmin > 0 ? clamp_round(neg_lo[s] / dmin, 0, 63) : 0;
  }
  uint8_t* b = out + 4;  // 12 bytes of 6-bit scales and mins (layout in ggml_types.cpp)
  for (int s = 0; s < 4; ++s) {
    b[s] = static_cast<uint8_t>((sc[s] & 63) | ((sc[s + 4] >> 4) << 6));
    b[s + 4] = static_cast<uint8_t>((mn[s] & 63) | ((mn[s + 4] >> 4) << 6));
    b[s + 8] = static_cast<uint8_t>((sc[s + 4] & 0x0F) | ((mn[s + 4] & 0x0F) << 4));
  }
  uint8_t* q = out + 16;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      int nib[2];
      for (int h = 0; h < 2; ++h) {
        const int s = 2 * c + h;
        const float scale = d * static_cast<float>(sc[s]);
        const float v = x[32 * s + l] + dmin * static_cast<float>(mn[s]);
        nib[h] = scale > 0 ? clamp_round(v / scale, 0, 15) : 0;
      }
      q[32 * c + l] = static_cast<uint8_t>(nib[0] | (nib[1] << 4));
    }
}

}  // namespace

bool ggml_type_quantizable(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0 ||
         t == GgmlType::Q4_K;
}

void ggml_quantize(GgmlType t, const float* src, uint8_t* dst, int64_t n) {
  VQ_CHECK(ggml_type_quantizable(t), InvalidArgument, "cannot quantize to ",
           ggml_type_name(static_cast<uint32_t>(t)),
           ": the quantizable types are F32, F16, BF16, Q8_0, Q4_K");
  const int64_t bv = ggml_block_values(t), bb = ggml_block_bytes(t);
  VQ_CHECK(n >= 0 && n % bv == 0, InvalidArgument, "cannot quantize ", n, " values to ",
           ggml_type_name(static_cast<uint32_t>(t)), ": not a multiple of the block size ", bv);
  for (int64_t b = 0; b < n / bv; ++b) {
    const float* x = src + b * bv;
    uint8_t* o = dst + b * bb;
    switch (t) {
      case GgmlType::F32:
        std::memcpy(o, x, 4);
        break;
      case GgmlType::F16:
        put16(o, fp32_to_fp16(*x));
        break;
      case GgmlType::BF16:
        put16(o, to_bf16(*x));
        break;
      case GgmlType::Q8_0:
        q8_0_block(x, o);
        break;
      default:
        q4_k_block(x, o);
        break;
    }
  }
}

}  // namespace vq

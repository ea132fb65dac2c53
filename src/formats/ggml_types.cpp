// ggml tensor types: names, block geometry and scalar dequantization to fp32.
//
// Block layouts (all little-endian; "half" is an IEEE binary16 scale):
//   F32 / F16 / BF16   one value per "block" of 4 / 2 / 2 bytes.
//   Q8_0  32 values, 34 B: half d; int8 q[32].                        v = d * q
//   Q4_0  32 values, 18 B: half d; 16 bytes of nibbles. Byte j's low nibble is value j, its high
//         nibble value j + 16.                                          v = d * (q - 8)
//   Q4_1  32 values, 20 B: half d, half m; nibbles as Q4_0.           v = d * q + m
//   Q5_0  32 values, 22 B: half d; uint32 qh (bit j = 5th bit of value j); nibbles as Q4_0.
//                                                                      v = d * (q - 16)
//   Q5_1  32 values, 24 B: half d, half m; qh; nibbles.               v = d * q + m
//   K-quants: super-blocks of 256 values.
//   Q4_K  144 B: half d, half dmin; 12 bytes holding eight 6-bit scales and eight 6-bit mins;
//         128 bytes of nibbles. Sub-block s (32 values) has v = d*sc[s] * q - dmin*mn[s]. The
//         nibbles come in 4 chunks of 32 bytes: chunk c's low nibbles are sub-block 2c, its high
//         nibbles sub-block 2c + 1.
//         6-bit packing: for s < 4, sc = b[s] & 63, mn = b[s+4] & 63; for s >= 4, the low 4 bits
//         come from b[s+4] (low nibble scale, high nibble min) and the top 2 bits from the top 2
//         bits of b[s-4] (scale) and b[s] (min).
//   Q5_K  176 B: half d, half dmin; 12 scale bytes as Q4_K; qh[32]; 128 bytes of nibbles. The
//         nibbles as Q4_K; the 5th bit of value l of sub-block s is bit s of qh[l].
//   Q6_K  210 B: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16], half d.
//         Two halves of 128 values; in half h (ql += 64h, qh += 32h, scales += 8h), for l < 32:
//         value l      = low nibble of ql[l]      | bits 0-1 of qh[l] << 4
//         value l + 32 = low nibble of ql[l + 32] | bits 2-3 of qh[l] << 4
//         value l + 64 = high nibble of ql[l]     | bits 4-5 of qh[l] << 4
//         value l + 96 = high nibble of ql[l + 32]| bits 6-7 of qh[l] << 4
//         each minus 32, times d * scales[value / 16] (the 16-value group's int8 scale).
#include <cstring>
#include <limits>

#include "formats/bf16.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/gguf.hpp"
#include "veloxquant/tensor.hpp"

namespace vq {
namespace {

struct TypeRow {
  uint32_t id;
  const char* name;
  int64_t block_values;  // 0 = not readable here
  int64_t block_bytes;
};

// Every id ggml has defined (names for errors); geometry only for the readable ones.
constexpr TypeRow kTypes[] = {
    {0, "F32", 1, 4},       {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},    {3, "Q4_1", 32, 20},
    {4, "Q4_2", 0, 0},      {5, "Q4_3", 0, 0},      {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},    {9, "Q8_1", 0, 0},      {10, "Q2_K", 0, 0},     {11, "Q3_K", 0, 0},
    {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176}, {14, "Q6_K", 256, 210}, {15, "Q8_K", 0, 0},
    {16, "IQ2_XXS", 0, 0},  {17, "IQ2_XS", 0, 0},   {18, "IQ3_XXS", 0, 0},  {19, "IQ1_S", 0, 0},
    {20, "IQ4_NL", 0, 0},   {21, "IQ3_S", 0, 0},    {22, "IQ2_S", 0, 0},    {23, "IQ4_XS", 0, 0},
    {24, "I8", 0, 0},       {25, "I16", 0, 0},      {26, "I32", 0, 0},      {27, "I64", 0, 0},
    {28, "F64", 0, 0},      {29, "IQ1_M", 0, 0},    {30, "BF16", 1, 2},     {34, "TQ1_0", 0, 0},
    {35, "TQ2_0", 0, 0},    {39, "MXFP4", 0, 0},
};

const TypeRow* row_of(uint32_t id) {
  for (const TypeRow& r : kTypes)
    if (r.id == id) return &r;
  return nullptr;
}

const TypeRow& supported_row(GgmlType t) {
  const TypeRow* r = row_of(static_cast<uint32_t>(t));
  VQ_CHECK(r != nullptr && r->block_values > 0, InvalidArgument, "ggml tensor type ",
           ggml_type_name(static_cast<uint32_t>(t)),
           " is not supported (supported: ", ggml_supported_types_list(), ")");
  return *r;
}

inline uint16_t rd16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
inline uint32_t rd32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
inline float half(const uint8_t* p) {
  return fp16_to_fp32(rd16(p));
}

// The 6-bit scale and min of sub-block s of a Q4_K / Q5_K super-block.
inline void k_scale_min(const uint8_t* b, int s, int& sc, int& mn) {
  if (s < 4) {
    sc = b[s] & 63;
    mn = b[s + 4] & 63;
  } else {
    sc = (b[s + 4] & 0x0F) | ((b[s - 4] >> 6) << 4);
    mn = (b[s + 4] >> 4) | ((b[s] >> 6) << 4);
  }
}

void deq_q8_0(const uint8_t* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
}
void deq_q4_0(const uint8_t* b, float* y) {
  const float d = half(b);
  const uint8_t* q = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((q[j] & 0x0F) - 8);
    y[j + 16] = d * static_cast<float>((q[j] >> 4) - 8);
  }
}
void deq_q4_1(const uint8_t* b, float* y) {
  const float d = half(b), m = half(b + 2);
  const uint8_t* q = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(q[j] & 0x0F) + m;
    y[j + 16] = d * static_cast<float>(q[j] >> 4) + m;
  }
}
void deq_q5_0(const uint8_t* b, float* y) {
  const float d = half(b);
  const uint32_t hi = rd32(b + 2);
  const uint8_t* q = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = static_cast<int>((q[j] & 0x0F) | (((hi >> j) & 1u) << 4));
    const int up = static_cast<int>((q[j] >> 4) | (((hi >> (j + 16)) & 1u) << 4));
    y[j] = d * static_cast<float>(lo - 16);
    y[j + 16] = d * static_cast<float>(up - 16);
  }
}
void deq_q5_1(const uint8_t* b, float* y) {
  const float d = half(b), m = half(b + 2);
  const uint32_t hi = rd32(b + 4);
  const uint8_t* q = b + 8;
  for (int j = 0; j < 16; ++j) {
    const unsigned lo = (q[j] & 0x0Fu) | (((hi >> j) & 1u) << 4);
    const unsigned up = (q[j] >> 4) | (((hi >> (j + 16)) & 1u) << 4);
    y[j] = d * static_cast<float>(lo) + m;
    y[j + 16] = d * static_cast<float>(up) + m;
  }
}
void deq_q4_k(const uint8_t* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int c = 0; c < 4; ++c) {
    int sc0, mn0, sc1, mn1;
    k_scale_min(scales, 2 * c, sc0, mn0);
    k_scale_min(scales, 2 * c + 1, sc1, mn1);
    const float d0 = d * static_cast<float>(sc0), m0 = dmin * static_cast<float>(mn0);
    const float d1 = d * static_cast<float>(sc1), m1 = dmin * static_cast<float>(mn1);
    for (int l = 0; l < 32; ++l) {
      y[64 * c + l] = d0 * static_cast<float>(q[32 * c + l] & 0x0F) - m0;
      y[64 * c + 32 + l] = d1 * static_cast<float>(q[32 * c + l] >> 4) - m1;
    }
  }
}
void deq_q5_k(const uint8_t* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + 48;
  for (int c = 0; c < 4; ++c) {
    int sc0, mn0, sc1, mn1;
    k_scale_min(scales, 2 * c, sc0, mn0);
    k_scale_min(scales, 2 * c + 1, sc1, mn1);
    const float d0 = d * static_cast<float>(sc0), m0 = dmin * static_cast<float>(mn0);
    const float d1 = d * static_cast<float>(sc1), m1 = dmin * static_cast<float>(mn1);
    for (int l = 0; l < 32; ++l) {
      const unsigned lo = (q[32 * c + l] & 0x0Fu) | (((qh[l] >> (2 * c)) & 1u) << 4);
      const unsigned up = (q[32 * c + l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1u) << 4);
      y[64 * c + l] = d0 * static_cast<float>(lo) - m0;
      y[64 * c + 32 + l] = d1 * static_cast<float>(up) - m1;
    }
  }
}
void deq_q6_k(const uint8_t* b, float* y) {
  const float d = half(b + 208);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b + 64 * h;
    const uint8_t* qh = b + 128 + 32 * h;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * h);
    float* out = y + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int v0 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int v1 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int v2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int v3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      const int g = l / 16;  // 16-value group within each 32-value quarter
      out[l] = d * static_cast<float>(sc[g]) * static_cast<float>(v0);
      out[l + 32] = d * static_cast<float>(sc[g + 2]) * static_cast<float>(v1);
      out[l + 64] = d * static_cast<float>(sc[g + 4]) * static_cast<float>(v2);
      out[l + 96] = d * static_cast<float>(sc[g + 6]) * static_cast<float>(v3);
    }
  }
}

}  // namespace

std::string ggml_type_name(uint32_t type) {
  const TypeRow* r = row_of(type);
  return r ? std::string(r->name) : "type#" + std::to_string(type);
}

bool ggml_type_supported(uint32_t type) {
  const TypeRow* r = row_of(type);
  return r != nullptr && r->block_values > 0;
}

std::string ggml_supported_types_list() {
  return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K";
}

int64_t ggml_block_values(GgmlType t) {
  return supported_row(t).block_values;
}
int64_t ggml_block_bytes(GgmlType t) {
  return supported_row(t).block_bytes;
}

uint64_t ggml_row_bytes(GgmlType t, int64_t n) {
  const TypeRow& r = supported_row(t);
  VQ_CHECK(n >= 0 && n % r.block_values == 0, InvalidArgument, "a run of ", n, " ", r.name,
           " values is not a whole number of blocks of ", r.block_values);
  const uint64_t blocks = static_cast<uint64_t>(n / r.block_values);
  VQ_CHECK(blocks <= std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(r.block_bytes),
           InvalidArgument, n, " ", r.name, " values overflow a 64-bit byte count");
  return blocks * static_cast<uint64_t>(r.block_bytes);
}

void ggml_dequantize(GgmlType t, const uint8_t* src, float* dst, int64_t n) {
  const TypeRow& r = supported_row(t);
  VQ_CHECK(n >= 0 && n % r.block_values == 0, InvalidArgument, "cannot dequantize ", n, " ", r.name,
           " values: not a multiple of the block size ", r.block_values);
  const int64_t blocks = n / r.block_values;
  if (n == 0) return;  // nothing to read (and dst may be null)
  switch (t) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(rd16(src + 2 * i));
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = formats::bf16_bits_to_float(rd16(src + 2 * i));
      return;
    default:
      break;
  }
  void (*fn)(const uint8_t*, float*) = nullptr;
  switch (t) {
    case GgmlType::Q8_0:
      fn = deq_q8_0;
      break;
    case GgmlType::Q4_0:
      fn = deq_q4_0;
      break;
    case GgmlType::Q4_1:
      fn = deq_q4_1;
      break;
    case GgmlType::Q5_0:
      fn = deq_q5_0;
      break;
    case GgmlType::Q5_1:
      fn = deq_q5_1;
      break;
    case GgmlType::Q4_K:
      fn = deq_q4_k;
      break;
    case GgmlType::Q5_K:
      fn = deq_q5_k;
      break;
    case GgmlType::Q6_K:
      fn = deq_q6_k;
      break;
    default:
      VQ_THROW(InvalidArgument, "no dequantizer for ", r.name);
  }
  for (int64_t b = 0; b < blocks; ++b) fn(src + b * r.block_bytes, dst + b * r.block_values);
}

}  // namespace vq

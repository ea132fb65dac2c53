// llama.cpp / ggml's q8_0 and q4_0 block formats, byte for byte.
//
//   q8_0 block (34 bytes): fp16 scale d (little-endian), then 32 int8 quants.
//        d = amax / 127, q = roundf(x / d) (round half away from zero); x ~= q * d.
//   q4_0 block (18 bytes): fp16 scale d, then 16 bytes of 4-bit quants: byte j holds value j in
//        its low nibble and value j + 16 in its high nibble.
//        d = m / -8 where m is the value of largest magnitude (sign kept, first one on ties),
//        q = min(15, trunc(x / d + 8.5)); x ~= (q - 8) * d.
// Both follow ggml's reference quantizers (quantize_row_q8_0_ref / quantize_row_q4_0_ref): the
// scale is computed in fp32, the quants use that fp32 scale and 1/d, and only the stored d is
// rounded to fp16 (round to nearest even). Our code keeps every product and sum a separately
// rounded IEEE operation (no fused multiply-add), which is the reference's plain C semantics.
//
// A row of k values takes ceil(k / 32) blocks. ggml itself only accepts k that is a multiple of 32;
// for other k we pad the last block with zeros (which changes neither amax nor the signed
// maximum), so the real values get exactly the codes they would get in a full block, and the
// partial block costs a whole block: 34 (q8_0) or 18 (q4_0) bytes.
#pragma once

#include <cstdint>

namespace vq::coding {

constexpr int64_t kGgmlBlockValues = 32;
constexpr int64_t kQ8_0BlockBytes = 2 + 32;
constexpr int64_t kQ4_0BlockBytes = 2 + 16;

enum class GgmlType : int { Q8_0 = 8, Q4_0 = 2 };  // ggml's own enum values for these types

/// Bytes of one block of `t`.
int64_t ggml_block_bytes(GgmlType t);
/// Blocks a row of k values takes: ceil(k / 32).
inline int64_t ggml_row_blocks(int64_t k) {
  return (k + kGgmlBlockValues - 1) / kGgmlBlockValues;
}
/// Bytes a row of k values takes.
inline int64_t ggml_row_bytes(GgmlType t, int64_t k) {
  return ggml_row_blocks(k) * ggml_block_bytes(t);
}

/// Quantize x[0:k) into ggml_row_bytes(t, k) bytes at out.
void ggml_quantize_row(GgmlType t, const float* x, int64_t k, uint8_t* out);
/// Dequantize ggml_row_bytes(t, k) bytes at in into y[0:k). Any byte pattern is a valid block
/// (an fp16 NaN/Inf scale decodes as such); callers that need finite output check it.
void ggml_dequantize_row(GgmlType t, const uint8_t* in, int64_t k, float* y);

// The same formulas over blocks of `block` values (an even number >= 2; ggml's formats are
// block = 32). A q8_0 block is an fp16 scale and `block` int8 quants (2 + block bytes); a q4_0
// block an fp16 scale and block / 2 bytes whose byte j holds value j (low nibble) and value
// j + block / 2 (high nibble). k must be a multiple of block (no padding). At block = 32 these are
// exactly ggml_quantize_row / ggml_dequantize_row's bytes and values.

/// Bytes of one block of `block` values.
int64_t ggml_block_bytes(GgmlType t, int64_t block);
/// Quantize x[0:k) into k / block blocks at out.
void ggml_quantize_blocks(GgmlType t, int64_t block, const float* x, int64_t k, uint8_t* out);
/// Inverse of ggml_quantize_blocks.
void ggml_dequantize_blocks(GgmlType t, int64_t block, const uint8_t* in, int64_t k, float* y);

}  // namespace vq::coding

// Fused row dot products for matvec (decode): each weight row is read once in its stored type and
// multiplied with the fp32 input as it is expanded in registers, instead of being decoded into a
// scratch tile that GEMV then reads back. Decode reads every weight once per token, so this is
// the loop that has to run at memory bandwidth.
//
// Types: F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K with AVX2 + FMA + F16C
// (the block-quantized types in 512-bit vectors where the build also has AVX-512 BW, 256-bit ones
// otherwise); any other type or build uses the tiled path in matmul.cpp. The
// block-quantized types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) multiply integers: the
// input is first rounded, per 32-value block, to integer levels of that block's largest
// magnitude (prepare_row_dot_input, once per product), and each weight block's codes meet those
// levels in exact int32 sums (a type's added min, Q4_1 / Q5_1 / Q4_K / Q5_K, meets the sum of the
// block's levels). The levels are int8 (|q| <= 127) for the K-quants (Q4_K, Q5_K, Q6_K) and,
// in AVX-512 BW builds, for Q4_0 / Q4_1 / Q5_0 / Q5_1: their unsigned codes meet them in byte
// products (VNNI's dpbusd, or maddubs), as llama.cpp's quantized products do (it rounds per 256
// values for the K-quants; here always per 32). Q8_0, and the other 32-value types in AVX2-only
// builds, keep int16 levels (|q| <= 32767), which their codes meet in madd. The input
// rounding, at most half a level (amax / (2 * levels)) per value, is the only error beyond fp32
// summation (F16 / BF16 rows multiply the fp32 input as it is). Each row's arithmetic (lanes,
// accumulators, summation order) is fixed by the row alone, so results do not depend on how rows
// are split across threads.
#pragma once

#include <cstdint>
#include <vector>

#include "veloxquant/weight_matrix.hpp"

namespace vq::kernels::detail {

/// Whether dot_rows has a fused kernel for type t in this build.
bool has_row_dot(GgmlType t);

/// Whether dot_rows rounds the input for type t (see above): error per value <= scale / 2.
bool row_dot_rounds_input(GgmlType t);

/// Input levels per sign for type t: x ~= scale * q with |q| <= the result (127 or 32767); 0
/// where dot_rows multiplies the fp32 input (or has no kernel for t).
int row_dot_input_levels(GgmlType t);

/// The input of one product, prepared once and shared by every row (and thread).
struct RowDotInput {
  GgmlType type = GgmlType::F32;
  const float* x = nullptr;  ///< the fp32 input (read by F16 / BF16 rows)
  int64_t cols = 0;
  std::vector<int16_t> q;  ///< [cols] rounded int16 levels (the 32-value block types)
  /// The K-quants: [cols] int8 levels. Q6_K's in value order; Q4_K's and Q5_K's with each
  /// 256-value super-block's eight 32-value blocks in the order 0, 2, 1, 3, 4, 6, 5, 7 (the
  /// order a 64-byte load of their nibbles meets them: low nibbles are blocks 0 and 2, high
  /// nibbles 1 and 3; the next 64 bytes 4-7 likewise). Q4_0 / Q4_1 / Q5_0 / Q5_1 where they meet
  /// int8 levels (AVX-512 BW builds): 64 per pair of blocks b, b + 1 (a last, lone block padded
  /// with 32 zeros), their 4-value groups alternating: b's values 0-3, b + 1's 0-3, b's 4-7, ...,
  /// b + 1's 12-15, then the same for values 16-31 (the codes' order in Block32ByteRows512).
  std::vector<int8_t> q8;
  /// Per 4 stored levels: -k times their sum, k what the kernel's unsigned codes carry above the
  /// signed ones (Q6_K 32, Q4_0 8, Q5_0 16); the int32 lanes' starting values.
  std::vector<int32_t> offset4;
  /// Q4_0 / Q4_1 / Q5_0 / Q5_1 on int8 levels: per 4 stored levels (one int32 lane), the input
  /// scale of their block, and (Q4_1 / Q5_1) that scale times the block's level sum / 8.
  std::vector<float> lane_scale, lane_min;
  std::vector<float> scale;   ///< [cols / 32] x ~= scale * q; NaN for a block with inf / NaN
  std::vector<int32_t> qsum;  ///< [cols / 32] sum of the block's levels (the min terms)
  /// Q4_K / Q5_K in AVX-512 builds, the lanes of the 512-bit kernel's interleaved factors, both
  /// [2 * cols / 32]: pair_scale holds block b's scale at 2b and at 2b + 1; pair_qsum holds 0 at
  /// 2b and block b's level sum (as float) at 2b + 1.
  std::vector<float> pair_scale, pair_qsum;
  std::vector<float> split;  ///< BF16: per 16 values of x, the 8 even then the 8 odd ones
};

/// Fills `in` for products of x (cols values) with rows of type t; reuses its buffers.
void prepare_row_dot_input(GgmlType t, const float* x, int64_t cols, RowDotInput& in);

/// For rows r in [r0, r1): y[r - r0] = dot(W row r, x), or y[r - r0] += that dot when
/// accumulate. Requires has_row_dot(w.type) and `in` prepared for (w.type, w.cols).
void dot_rows(const WeightMatrix& w, const RowDotInput& in, int64_t r0, int64_t r1, float* y,
              bool accumulate);
/// The same, preparing the input itself.
void dot_rows(const WeightMatrix& w, const float* x, int64_t r0, int64_t r1, float* y,
              bool accumulate);

}  // namespace vq::kernels::detail

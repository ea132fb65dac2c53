// Fused row dot products for matvec (decode): each weight row is read once in its stored type and
// multiplied with the fp32 input as it is expanded in registers, instead of being decoded into a
// scratch tile that GEMV then reads back. Decode reads every weight once per token, so this is
// the loop that has to run at memory bandwidth.
//
// Types: F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K with AVX2 + FMA + F16C; any other type or build uses
// the tiled path in matmul.cpp. Each row's arithmetic (lanes, accumulators, summation order) is
// fixed by the row alone, so results do not depend on how rows are split across threads.
#pragma once

#include <cstdint>

#include "veloxquant/weight_matrix.hpp"

namespace vq::kernels::detail {

/// Whether dot_rows has a fused kernel for type t in this build.
bool has_row_dot(GgmlType t);

/// For rows r in [r0, r1): y[r - r0] = dot(W row r, x), or y[r - r0] += that dot when
/// accumulate. Requires has_row_dot(w.type).
void dot_rows(const WeightMatrix& w, const float* x, int64_t r0, int64_t r1, float* y,
              bool accumulate);

}  // namespace vq::kernels::detail

// Matrix-vector and matrix-matrix products of a stored-type weight matrix (WeightMatrix: F32,
// F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) with fp32 activations. The weights
// are never converted as a whole: each kernel decodes a few rows at a time into a small
// thread-local scratch.
//
//   *_ref   plain scalar loops: per row, block by block, each block decoded by ggml_dequantize
//           and summed in order into one float. The yardstick for the fast versions.
//   matvec / matmul  fast: fp32 weights are multiplied in place by Eigen (exactly the products
//           the engine used before these kernels existed). matvec on F16, BF16, Q8_0, Q4_0,
//           Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K (AVX2 + FMA + F16C builds) reads each row
//           once and expands it in registers (row_dot.hpp); any other type or build, and every
//           matmul, decodes a tile of rows at a time
//           into 64-byte-aligned scratch and multiplies it by Eigen's SIMD GEMV / GEMM.
//           Output rows are split across the thread pool (core/thread_pool.hpp) in pieces
//           that depend only on the shapes, each row computed exactly as in one product
//           over the whole matrix: bit-identical for any thread count.
//
// Shapes: W is [rows, cols]; matvec: y[rows] = W x[cols]; matmul: Y[n, rows] = X[n, cols] W^T,
// X and Y row-major. With accumulate = true the product is added to y / Y instead.
#pragma once

#include <cstdint>

#include "veloxquant/weight_matrix.hpp"

namespace vq::kernels {

void matvec_ref(const WeightMatrix& w, const float* x, float* y);
void matmul_ref(const WeightMatrix& w, const float* x, int64_t n, float* y);

void matvec(const WeightMatrix& w, const float* x, float* y, bool accumulate = false);
void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y, bool accumulate = false);

/// Row r of W as fp32 (cols values), e.g. one token's embedding.
void dequantize_row(const WeightMatrix& w, int64_t r, float* out);

}  // namespace vq::kernels

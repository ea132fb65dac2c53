// Attention kernels on q8_0 / q4_0 rows (coding/ggml_blocks.hpp, blocks of `block` = 32, 16 or 8
// values, every row D values = D / block blocks, rows `stride` bytes apart, no alignment
// assumed), computed on the blocks the way ggml's vec_dot kernels do: per block, the sum of
// code * x over the block's values, times the block's scale.
//
//   ggml_dot_rows:    out[i] = sum_b d_ib * sum_j c_ibj * q[b * block + j]        (float q)
//   ggml_dot_rows_q8: out[i] = sum_b (d_ib * e_b) * sum_j c_ibj * p_bj           (integer inner
//                     sum), with the query given as q8_0 blocks (scale e_b, codes p_bj) as
//                     ggml_quantize_blocks(Q8_0, block, ...) writes them: llama.cpp's K.Q over a
//                     quantized K cache (its vec_dot_type for q8_0 and q4_0 is q8_0).
//   ggml_axpy_rows:   acc[b * block + j] += sum_i (w[i] * d_ib) * c_ibj, rows in order.
// c is the stored code (q8_0: the int8; q4_0: the nibble minus 8) and d the block's fp16 scale.
//
// Each has a scalar `_ref` twin; the fast ones use AVX2 / FMA when the build has them (and are
// the `_ref` otherwise). The summation order depends on D and block only: a row's dot product
// is a function of its bytes and the query, and accumulation adds rows one after the other, so
// splitting [0, n) differently gives the same bits.
#pragma once

#include <cstdint>

#include "coding/ggml_blocks.hpp"

namespace vq::coding {

void ggml_dot_rows(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                   int64_t D, const float* q, float* out);
void ggml_dot_rows_ref(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                       int64_t D, const float* q, float* out);
void ggml_dot_rows_q8(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                      int64_t D, const uint8_t* q8, float* out);
void ggml_dot_rows_q8_ref(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                          int64_t D, const uint8_t* q8, float* out);
void ggml_axpy_rows(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                    int64_t D, const float* w, float* acc);
void ggml_axpy_rows_ref(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                        int64_t D, const float* w, float* acc);

/// ggml_dot_rows for nq queries (query j at qs + j * D, results at out + j * out_stride), and
/// ggml_axpy_rows for nw weight rows (j at w + j * w_stride, into acc + j * D): each row's
/// blocks unpacked once for all of them, every query / accumulator getting the bits the
/// one-at-a-time kernel gives it.
void ggml_dot_rows_many(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                        int64_t D, const float* qs, int64_t nq, float* out, int64_t out_stride);
void ggml_axpy_rows_many(GgmlType t, int64_t block, const uint8_t* rows, int64_t stride, int64_t n,
                         int64_t D, const float* w, int64_t w_stride, int64_t nw, float* acc);

/// True when the fast kernels run vector code in this build.
bool ggml_dot_vectorized();

}  // namespace vq::coding

// Attention kernels on stored 16- and 32-bit float rows: K.q dot products and weighted sums of V
// rows computed on the resident bytes, without a decoded copy.
//
// `rows` points at n rows of D values each, `stride` bytes apart (D * 2 for fp16/bf16, D * 4 for
// fp32); no alignment is assumed. For every kernel:
//   *_dot_rows:  out[i] = sum_d row_i[d] * q[d]                 (i in [0, n))
//   *_axpy_rows: acc[d] += sum_i w[i] * row_i[d], rows taken in order i = 0, 1, ..., n - 1.
// The summation order is fixed by D alone: a dot product's value depends only on the row's bytes
// and q (never on where the row sits or how a caller splits [0, n)), and an accumulation adds the
// rows one after the other, so splitting [0, n) into consecutive calls gives the same bits.
//
// Each kernel has a plain scalar `_ref` twin (sequential sums, no vector code) that the tests
// compare it with; the fast one uses F16C / AVX2 / FMA when the build has them and is the `_ref`
// otherwise.
#pragma once

#include <cstdint>

namespace vq::store {

enum class FloatRows : int { F32, F16, BF16 };

void float_dot_rows(FloatRows t, const uint8_t* rows, int64_t stride, int64_t n, int64_t D,
                    const float* q, float* out);
void float_dot_rows_ref(FloatRows t, const uint8_t* rows, int64_t stride, int64_t n, int64_t D,
                        const float* q, float* out);
void float_axpy_rows(FloatRows t, const uint8_t* rows, int64_t stride, int64_t n, int64_t D,
                     const float* w, float* acc);
void float_axpy_rows_ref(FloatRows t, const uint8_t* rows, int64_t stride, int64_t n, int64_t D,
                         const float* w, float* acc);

/// float_dot_rows for nq queries (query j at qs + j * D, results at out + j * out_stride): each
/// row is widened once for all of them, and every query gets the bits float_dot_rows gives it
/// alone (a KV head's query group in one pass over its keys).
void float_dot_rows_many(FloatRows t, const uint8_t* rows, int64_t stride, int64_t n, int64_t D,
                         const float* qs, int64_t nq, float* out, int64_t out_stride);
/// float_axpy_rows for nw weight vectors (j at w + j * w_stride, accumulating into acc + j * D),
/// each row widened once; every accumulator gets the bits float_axpy_rows gives it alone.
void float_axpy_rows_many(FloatRows t, const uint8_t* rows, int64_t stride, int64_t n, int64_t D,
                          const float* w, int64_t w_stride, int64_t nw, float* acc);

/// True when float_dot_rows / float_axpy_rows run vector code in this build.
bool float_rows_vectorized();

}  // namespace vq::store

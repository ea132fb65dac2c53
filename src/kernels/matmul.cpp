// Stored-type matrix kernels (see matmul.hpp).
#include "kernels/matmul.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/thread_pool.hpp"
#include "formats/bf16.hpp"
#include "kernels/row_dot.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/tensor.hpp"

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace vq::kernels {

namespace {

using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMat = Eigen::Map<const RowMatF>;
using MutMat = Eigen::Map<RowMatF>;
using ConstVec = Eigen::Map<const Eigen::VectorXf>;
using MutVec = Eigen::Map<Eigen::VectorXf>;
using OuterStride = Eigen::OuterStride<>;

// Rows decoded per tile: small enough that the tile stays in L2 for common widths (64 rows of
// 4096 floats = 1 MiB), large enough for Eigen's GEMM to block well.
constexpr int64_t kMatvecTile = 16;
constexpr int64_t kMatmulTile = 64;

void check(const WeightMatrix& w) {
  VQ_CHECK(w.rows >= 0 && w.cols >= 0 && (w.data != nullptr || w.rows * w.cols == 0),
           InvalidArgument, "kernels: weight matrix [", w.rows, ", ", w.cols,
           "] has no data or a negative shape");
  (void)w.row_bytes();  // throws when cols is not a whole number of blocks
}

// fp32 weights that can be read in place (4-byte aligned; safetensors data may not be).
bool in_place_f32(const WeightMatrix& w) {
  return w.type == GgmlType::F32 && reinterpret_cast<uintptr_t>(w.data) % alignof(float) == 0;
}

// Output rows are split into pieces for the thread pool. A piece is a whole number of units of
// `unit` rows (the last unit also takes the rows % unit left over), so each row is computed by
// exactly the instructions it gets in one product over the whole matrix: Eigen's row-major GEMV
// handles rows in groups of 8 from the first row (and takes another path for a single row), and
// its GEMM register-blocks the weight rows by 3 SIMD packets (24 floats with AVX, 48 with
// AVX-512); decoded tiles start at multiples of the tile. Pieces depend only on the shapes.
constexpr int64_t kMatvecUnit = kMatvecTile;  // 16: groups of 8, whole tiles
// The fused matrix-vector products' pieces: at least this many multiply-adds (about 5 µs of a
// thread's time on Q8_0 weights), finer than the pool's default. Each thread runs its own
// region of consecutive pieces (core/thread_pool.hpp), so a finer cut no longer breaks its
// stream through the weights; it evens out the end of a product and gives small ones (a
// 512 x 2048 key or value projection: one piece at 1 << 20) to every thread. 1 << 17 against
// 1 << 20 with regions, two threads, Q8_0: 512 x 2048 49 -> 35 µs, 2048 x 8192 601 -> 492 µs,
// 2048 x 2048 and 32000 x 2048 the same within noise (/tmp benchmark, session 15).
constexpr int64_t kFusedMatvecPieceMacs = int64_t{1} << 17;
constexpr int64_t kMatmulUnitF32 = 48;
constexpr int64_t kMatmulUnitTiled = kMatmulTile;  // 64
// fn(r0, r1) over consecutive row ranges covering [0, rows), run on the thread pool.
// min_macs: a piece's least work.
template <typename Fn>
void for_row_pieces(int64_t rows, int64_t unit, int64_t macs_per_row, Fn&& fn,
                    int64_t min_macs = min_piece_macs()) {
  if (rows == 0) return;
  const int64_t units = std::max<int64_t>(1, rows / unit);
  const int64_t grain = grain_for(unit * macs_per_row, min_macs);
  parallel_for(units, grain,
               [&](int64_t b, int64_t e) { fn(b * unit, e == units ? rows : e * unit); });
}

AlignedFloats& scratch() {
  thread_local AlignedFloats s;
  return s;
}

// Rows [r0, r0 + nr) decoded into dst [nr, cols].
void decode_rows(const WeightMatrix& w, int64_t r0, int64_t nr, float* dst) {
  const uint64_t rb = w.row_bytes();
  const uint8_t* src = w.data + static_cast<uint64_t>(r0) * rb;
  const int64_t n = nr * w.cols;
  switch (w.type) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = formats::bf16_bits_to_float(h);
      }
      return;
#if defined(__F16C__)
    case GgmlType::F16: {
      int64_t i = 0;
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(
            dst + i,
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
      for (; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = fp16_to_fp32(h);
      }
      return;
    }
#endif
    default:
      ggml_dequantize(w.type, src, dst, n);
  }
}

// fn(rows, r0, nr) for consecutive tiles [r0, r0 + nr) of at most `tile` rows covering [p0, p1),
// each decoded into this thread's scratch (rows: [nr, cols]).
template <typename Fn>
void for_decoded_tiles(const WeightMatrix& w, int64_t p0, int64_t p1, int64_t tile, Fn&& fn) {
  AlignedFloats& s = scratch();
  const int64_t need = std::min(tile, p1 - p0) * w.cols;
  if (static_cast<int64_t>(s.size()) < need) s.resize(static_cast<size_t>(need));
  for (int64_t r0 = p0; r0 < p1; r0 += tile) {
    const int64_t nr = std::min(tile, p1 - r0);
    decode_rows(w, r0, nr, s.data());
    fn(static_cast<const float*>(s.data()), r0, nr);
  }
}

#if defined(__AVX512F__)
// Y[i, r] (+)= sum_c X[i, c] W[r, c] for i < n, r < nr (nr <= kMatmulTile), W a tile of weight
// rows [nr, K] row-major, X [n, K], Y rows ldy apart. Each output is one fused multiply-add chain
// over c = 0 .. K - 1 (then added to Y when accumulating), so its bits depend on its row of X and
// its row of W only: not on the tile, the piece or the thread count. The tile is packed into
// panels of 32 weight rows, column-major ([K][32], zero past nr); a register block of 8 rows of X
// by one panel (16 512-bit accumulators) then streams X once per panel.
constexpr int64_t kPanel = 32;

template <int MR>
void gemm_block(const float* X, int64_t ldx, int64_t K, const float* P, float* Y, int64_t ldy,
                int64_t ncols, bool accumulate) {
  __m512 a0[MR], a1[MR];
  for (int i = 0; i < MR; ++i) a0[i] = a1[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < K; ++c) {
    const __m512 w0 = _mm512_load_ps(P + c * kPanel);
    const __m512 w1 = _mm512_load_ps(P + c * kPanel + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512 x = _mm512_set1_ps(X[i * ldx + c]);
      a0[i] = _mm512_fmadd_ps(x, w0, a0[i]);
      a1[i] = _mm512_fmadd_ps(x, w1, a1[i]);
    }
  }
  const auto lanes = [](int64_t m) {
    return static_cast<__mmask16>(m >= 16 ? 0xffff : (m <= 0 ? 0 : (1u << m) - 1u));
  };
  const __mmask16 m0 = lanes(ncols), m1 = lanes(ncols - 16);
  for (int i = 0; i < MR; ++i) {
    float* y = Y + i * ldy;
    if (accumulate) {
      a0[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, y), a0[i]);
      a1[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, y + 16), a1[i]);
    }
    _mm512_mask_storeu_ps(y, m0, a0[i]);
    _mm512_mask_storeu_ps(y + 16, m1, a1[i]);
  }
}

using GemmBlockFn = void (*)(const float*, int64_t, int64_t, const float*, float*, int64_t, int64_t,
                             bool);
constexpr GemmBlockFn kGemmBlocks[8] = {nullptr,       gemm_block<1>, gemm_block<2>, gemm_block<3>,
                                        gemm_block<4>, gemm_block<5>, gemm_block<6>, gemm_block<7>};

AlignedFloats& panel_scratch() {
  thread_local AlignedFloats s;
  return s;
}

void gemm_tile(const float* X, int64_t n, int64_t K, const float* W, int64_t r0, int64_t nr,
               float* y, int64_t ldy, bool accumulate) {
  AlignedFloats& P = panel_scratch();
  const int64_t need = K * kPanel;
  if (static_cast<int64_t>(P.size()) < need) P.resize(static_cast<size_t>(need));
  for (int64_t j0 = 0; j0 < nr; j0 += kPanel) {
    const int64_t nc = std::min(kPanel, nr - j0);
    float* pk = P.data();
    for (int64_t j = 0; j < kPanel; ++j) {
      if (j < nc) {
        const float* wr = W + (j0 + j) * K;
        for (int64_t c = 0; c < K; ++c) pk[c * kPanel + j] = wr[c];
      } else {
        for (int64_t c = 0; c < K; ++c) pk[c * kPanel + j] = 0.0f;
      }
    }
    float* yc = y + r0 + j0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      gemm_block<8>(X + i * K, K, K, pk, yc + i * ldy, ldy, nc, accumulate);
    if (i < n) kGemmBlocks[n - i](X + i * K, K, K, pk, yc + i * ldy, ldy, nc, accumulate);
  }
}
#endif

}  // namespace

void dequantize_row(const WeightMatrix& w, int64_t r, float* out) {
  check(w);
  VQ_CHECK(r >= 0 && r < w.rows, InvalidArgument, "kernels: row ", r, " is outside [0, ", w.rows,
           ")");
  decode_rows(w, r, 1, out);
}

void matvec_ref(const WeightMatrix& w, const float* x, float* y) {
  check(w);
  const int64_t bv = ggml_block_values(w.type), bb = ggml_block_bytes(w.type);
  std::vector<float> blk(static_cast<size_t>(bv));
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint8_t* row = w.row(r);
    float acc = 0.0f;
    for (int64_t b = 0; b * bv < w.cols; ++b) {
      ggml_dequantize(w.type, row + b * bb, blk.data(), bv);
      for (int64_t j = 0; j < bv; ++j) acc += blk[static_cast<size_t>(j)] * x[b * bv + j];
    }
    y[r] = acc;
  }
}

void matmul_ref(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  for (int64_t s = 0; s < n; ++s) matvec_ref(w, x + s * w.cols, y + s * w.rows);
}

void matvec(const WeightMatrix& w, const float* x, float* y, bool accumulate) {
  check(w);
  const ConstVec xv(x, w.cols);
  // y[r0 : r0 + nr] = W[r0 : r0 + nr] x
  const auto product = [&](const float* wrows, int64_t r0, int64_t nr) {
    const ConstMat m(wrows, nr, w.cols);
    if (accumulate)
      MutVec(y + r0, nr).noalias() += m * xv;
    else
      MutVec(y + r0, nr).noalias() = m * xv;
  };
  if (in_place_f32(w)) {
    const float* data = reinterpret_cast<const float*>(w.data);
    for_row_pieces(w.rows, kMatvecUnit, w.cols,
                   [&](int64_t p0, int64_t p1) { product(data + p0 * w.cols, p0, p1 - p0); });
    return;
  }
  if (detail::has_row_dot(w.type)) {  // fused: each row read once, expanded in registers
    // Prepared once by the calling thread, read by every piece while it waits for them.
    // (A pointer: a thread_local named inside the lambda would be each worker's own.)
    thread_local detail::RowDotInput caller_input;
    const detail::RowDotInput* in = &caller_input;
    detail::prepare_row_dot_input(w.type, x, w.cols, caller_input);
    for_row_pieces(
        w.rows, kMatvecUnit, w.cols,
        [&](int64_t p0, int64_t p1) { detail::dot_rows(w, *in, p0, p1, y + p0, accumulate); },
        std::min(min_piece_macs(), kFusedMatvecPieceMacs));
    return;
  }
  for_row_pieces(w.rows, kMatvecUnit, w.cols, [&](int64_t p0, int64_t p1) {
    for_decoded_tiles(w, p0, p1, kMatvecTile, product);
  });
}

void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y, bool accumulate) {
  check(w);
  VQ_CHECK(n >= 0, InvalidArgument, "kernels::matmul: n = ", n, " < 0");
  if (n == 0 || w.rows == 0) return;
#if defined(__AVX512F__)
  // Register-blocked AVX-512 product on decoded tiles (or the fp32 rows in place).
  if (w.cols > 0) {
    const auto tile = [&](const float* wrows, int64_t r0, int64_t nr) {
      gemm_tile(x, n, w.cols, wrows, r0, nr, y, w.rows, accumulate);
    };
    if (in_place_f32(w)) {
      const float* data = reinterpret_cast<const float*>(w.data);
      for_row_pieces(w.rows, kMatmulUnitTiled, n * w.cols, [&](int64_t p0, int64_t p1) {
        for (int64_t r0 = p0; r0 < p1; r0 += kMatmulTile)
          tile(data + r0 * w.cols, r0, std::min(kMatmulTile, p1 - r0));
      });
    } else {
      for_row_pieces(w.rows, kMatmulUnitTiled, n * w.cols, [&](int64_t p0, int64_t p1) {
        for_decoded_tiles(w, p0, p1, kMatmulTile, tile);
      });
    }
    return;
  }
#endif
  const ConstMat X(x, n, w.cols);
  // Y[:, r0 : r0 + nr] = X W[r0 : r0 + nr]^T
  const auto product = [&](const float* wrows, int64_t r0, int64_t nr) {
    const ConstMat m(wrows, nr, w.cols);
    Eigen::Map<RowMatF, Eigen::Unaligned, OuterStride> Y(y + r0, n, nr, OuterStride(w.rows));
    if (accumulate)
      Y.noalias() += X * m.transpose();
    else
      Y.noalias() = X * m.transpose();
  };
  if (in_place_f32(w)) {
    const float* data = reinterpret_cast<const float*>(w.data);
    for_row_pieces(w.rows, kMatmulUnitF32, n * w.cols,
                   [&](int64_t p0, int64_t p1) { product(data + p0 * w.cols, p0, p1 - p0); });
    return;
  }
  for_row_pieces(w.rows, kMatmulUnitTiled, n * w.cols, [&](int64_t p0, int64_t p1) {
    for_decoded_tiles(w, p0, p1, kMatmulTile, product);
  });
}

}  // namespace vq::kernels

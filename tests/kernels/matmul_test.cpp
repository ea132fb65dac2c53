// Stored-type kernels: for every supported type, matvec / matmul and their _ref twins against
// dequantize-then-multiply in double, and the fast fp32 path bit-identical to a plain Eigen
// product (what the engine computed before the kernels).
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.hpp"
#include "formats/quant_blocks.hpp"
#include "kernels/matmul.hpp"
#include "kernels/row_dot.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/threads.hpp"

namespace {

using vq::GgmlType;
using vq::WeightMatrix;

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                           GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

std::vector<float> randn(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// Y[n, rows] = X W^T in double from the dequantized weights; also sum |w x| per output, the
// scale float rounding is measured against.
void expected(const std::vector<float>& W, const std::vector<float>& X, int64_t rows, int64_t cols,
              int64_t n, std::vector<double>& y, std::vector<double>& mag) {
  y.assign(static_cast<size_t>(n * rows), 0.0);
  mag.assign(y.size(), 0.0);
  for (int64_t s = 0; s < n; ++s)
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0, m = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = static_cast<double>(W[static_cast<size_t>(r * cols + c)]) *
                         X[static_cast<size_t>(s * cols + c)];
        acc += p;
        m += std::fabs(p);
      }
      y[static_cast<size_t>(s * rows + r)] = acc;
      mag[static_cast<size_t>(s * rows + r)] = m;
    }
}

void expect_close(const float* got, const std::vector<double>& want, const std::vector<double>& mag,
                  const char* what, GgmlType t, const std::vector<double>* extra = nullptr) {
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-6 * mag[i] + (extra ? (*extra)[i] : 0.0) + 1e-30)
        << what << " " << vq::ggml_type_name(static_cast<uint32_t>(t)) << " at " << i;
}

// What the fused row dots' input rounding may add to row r of W x (row_dot.hpp): per 32-value
// block b, half a level (amax_b / levels / 2, levels = row_dot_input_levels(t): 127, or 32767
// for the 32-value types in AVX2-only builds) times sum |w| over the block; zero for types whose
// rows multiply the fp32 input.
std::vector<double> input_rounding(GgmlType t, const std::vector<float>& W, const float* x,
                                   int64_t rows, int64_t cols) {
  std::vector<double> out(static_cast<size_t>(rows), 0.0);
  if (!vq::kernels::detail::row_dot_rounds_input(t)) return out;
  for (int64_t b = 0; b < cols / 32; ++b) {
    double amax = 0;
    for (int64_t c = 32 * b; c < 32 * b + 32; ++c) amax = std::max(amax, std::fabs(double(x[c])));
    const double half_level =
        0.5 * amax / vq::kernels::detail::row_dot_input_levels(t) * (1 + 1e-5);
    for (int64_t r = 0; r < rows; ++r) {
      double wabs = 0;
      for (int64_t c = 32 * b; c < 32 * b + 32; ++c)
        wabs += std::fabs(double(W[static_cast<size_t>(r * cols + c)]));
      out[static_cast<size_t>(r)] += half_level * wabs;
    }
  }
  return out;
}

// What matmul computes for fp32 weights, bit for bit: on AVX-512 builds each output is one fused
// multiply-add chain over the columns in order, starting from 0 (the register-blocked kernel);
// elsewhere one Eigen product over the whole matrix.
Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> fp32_product(
    const float* W, const float* X, int64_t rows, int64_t cols, int64_t n) {
  using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
#if defined(__AVX512F__)
  RowMatF out(n, rows);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      float acc = 0.0f;
      for (int64_t c = 0; c < cols; ++c) acc = std::fma(X[i * cols + c], W[r * cols + c], acc);
      out(i, r) = acc;
    }
  return out;
#else
  const Eigen::Map<const RowMatF> Wm(W, rows, cols), Xm(X, n, cols);
  return Xm * Wm.transpose();
#endif
}

TEST(Kernels, EveryTypeMatchesDequantizeThenMultiply) {
  // 37 rows: not a multiple of either tile (16 / 64), so the partial tiles are exercised.
  const int64_t rows = 37, cols = 512, n = 5;
  for (GgmlType t : kTypes) {
    const vqtest::Bytes data = vqtest::random_stored(t, rows * cols, 11 + static_cast<uint64_t>(t));
    const WeightMatrix w{t, data.data(), rows, cols};
    std::vector<float> W(static_cast<size_t>(rows * cols));
    vq::ggml_dequantize(t, data.data(), W.data(), rows * cols);
    for (float v : W) ASSERT_TRUE(std::isfinite(v));
    const std::vector<float> X = randn(n * cols, 3);
    std::vector<double> want, mag;
    expected(W, X, rows, cols, n, want, mag);

    std::vector<float> y(static_cast<size_t>(n * rows));
    vq::kernels::matmul(w, X.data(), n, y.data());
    expect_close(y.data(), want, mag, "matmul", t);
    vq::kernels::matmul_ref(w, X.data(), n, y.data());
    expect_close(y.data(), want, mag, "matmul_ref", t);
    for (int64_t s = 0; s < n; ++s) {
      std::vector<double> ws(want.begin() + s * rows, want.begin() + (s + 1) * rows);
      std::vector<double> ms(mag.begin() + s * rows, mag.begin() + (s + 1) * rows);
      std::vector<float> v(static_cast<size_t>(rows));
      const std::vector<double> rounding = input_rounding(t, W, X.data() + s * cols, rows, cols);
      vq::kernels::matvec(w, X.data() + s * cols, v.data());
      expect_close(v.data(), ws, ms, "matvec", t, &rounding);
      vq::kernels::matvec_ref(w, X.data() + s * cols, v.data());
      expect_close(v.data(), ws, ms, "matvec_ref", t);
      // accumulate adds the product to what is there
      std::vector<float> acc(static_cast<size_t>(rows), 1.0f);
      vq::kernels::matvec(w, X.data() + s * cols, acc.data(), true);
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_NEAR(acc[static_cast<size_t>(r)], 1.0 + ws[static_cast<size_t>(r)],
                    2e-6 * (ms[static_cast<size_t>(r)] + 1.0) + rounding[static_cast<size_t>(r)]);
    }
    std::vector<float> acc(static_cast<size_t>(n * rows), -2.0f);
    vq::kernels::matmul(w, X.data(), n, acc.data(), true);
    for (size_t i = 0; i < acc.size(); ++i)
      ASSERT_NEAR(acc[i], want[i] - 2.0, 2e-6 * (mag[i] + 2.0));
    std::vector<float> row(static_cast<size_t>(cols));
    vq::kernels::dequantize_row(w, rows - 1, row.data());
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(row[static_cast<size_t>(c)], W[static_cast<size_t>((rows - 1) * cols + c)]);
  }
}

// matvec's fused row dots (row_dot.hpp): widths that leave every kind of tail (one value, a
// partial 8-lane step, an odd number of 32-value blocks, one K-quant super-block) and rows at
// both signs of large inputs, against dequantize-then-multiply in double; accumulate adds.
TEST(Kernels, FusedRowDotsMatchDequantizeThenMultiplyAtEveryWidth) {
  struct Case {
    GgmlType t;
    std::vector<int64_t> widths;
  };
  const std::vector<Case> cases = {
      {GgmlType::F16, {1, 7, 8, 9, 31, 32, 40, 45, 300}},
      {GgmlType::BF16, {1, 7, 8, 9, 31, 32, 40, 45, 300}},
      // Q8_0: 16-block groups (512 values) with and without blocks left over
      {GgmlType::Q8_0, {32, 64, 96, 160, 512, 544, 1056}},
      {GgmlType::Q4_0, {32, 64, 96, 160}},
      {GgmlType::Q4_1, {32, 64, 96, 160, 224}},
      {GgmlType::Q5_0, {32, 64, 96, 160, 224}},
      {GgmlType::Q5_1, {32, 64, 96, 160, 224}},
      {GgmlType::Q4_K, {256, 512, 768}},
      {GgmlType::Q6_K, {256, 512, 768}},
      {GgmlType::Q5_K, {256, 512, 768}},
  };
  const int64_t rows = 19;
  int fused = 0;
  for (const Case& c : cases) {
    if (!vq::kernels::detail::has_row_dot(c.t))
      GTEST_SKIP() << "no fused row dots in this build (needs AVX2, FMA and F16C)";
    ++fused;
    for (int64_t cols : c.widths) {
      const vqtest::Bytes data =
          vqtest::random_stored(c.t, rows * cols, 40 + static_cast<uint64_t>(cols));
      const WeightMatrix w{c.t, data.data(), rows, cols};
      std::vector<float> W(static_cast<size_t>(rows * cols));
      vq::ggml_dequantize(c.t, data.data(), W.data(), rows * cols);
      std::vector<float> X = randn(cols, 7 + static_cast<uint64_t>(cols));
      for (float& v : X) v *= 100.0f;
      std::vector<double> want, mag;
      expected(W, X, rows, cols, 1, want, mag);
      const std::vector<double> rounding = input_rounding(c.t, W, X.data(), rows, cols);
      std::vector<float> y(static_cast<size_t>(rows));
      vq::kernels::matvec(w, X.data(), y.data());
      expect_close(y.data(), want, mag, ("fused matvec, cols " + std::to_string(cols)).c_str(), c.t,
                   &rounding);
      std::vector<float> alone(5);  // rows [3, 8) on their own: the same bits as in the product
      vq::kernels::detail::dot_rows(w, X.data(), 3, 8, alone.data(), false);
      EXPECT_EQ(std::memcmp(alone.data(), y.data() + 3, 5 * sizeof(float)), 0)
          << vq::ggml_type_name(static_cast<uint32_t>(c.t)) << " cols " << cols;
      std::vector<float> part(5, 0.5f);  // rows [3, 8) added to 0.5
      vq::kernels::detail::dot_rows(w, X.data(), 3, 8, part.data(), true);
      for (int64_t r = 0; r < 5; ++r)
        ASSERT_NEAR(
            part[static_cast<size_t>(r)], 0.5 + want[static_cast<size_t>(r + 3)],
            2e-6 * (mag[static_cast<size_t>(r + 3)] + 0.5) + rounding[static_cast<size_t>(r + 3)])
            << vq::ggml_type_name(static_cast<uint32_t>(c.t)) << " cols " << cols;
    }
  }
  EXPECT_EQ(fused, static_cast<int>(cases.size()));  // every type here, AVX2 or AVX-512
}

// Matrices of 512 KiB and more take the fused kernels that request their weight bytes ahead
// (row_dot.cpp); smaller ones take the same kernels without the requests. The requests must not
// change a bit: each type's first rows, as a matrix of their own (small), give exactly what they
// give inside a matrix past the threshold.
TEST(Kernels, PrefetchingRowDotsGiveTheBitsOfTheSmallMatrixOnes) {
  const GgmlType types[] = {GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                            GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,
                            GgmlType::Q5_K, GgmlType::Q6_K};
  const int64_t cols = 2048, few = 7;
  for (const GgmlType t : types) {
    if (!vq::kernels::detail::has_row_dot(t))
      GTEST_SKIP() << "no fused row dots in this build (needs AVX2, FMA and F16C)";
    const WeightMatrix probe{t, nullptr, 1, cols};
    const int64_t rows = (768 * 1024) / static_cast<int64_t>(probe.row_bytes()) + 1;
    const vqtest::Bytes data = vqtest::random_stored(t, rows * cols, 90);
    const WeightMatrix big{t, data.data(), rows, cols}, small{t, data.data(), few, cols};
    ASSERT_GE(big.row_bytes() * static_cast<uint64_t>(rows), uint64_t{512} * 1024);
    ASSERT_LT(small.row_bytes() * static_cast<uint64_t>(few), uint64_t{512} * 1024);
    const std::vector<float> x = randn(cols, 91);
    std::vector<float> y_big(static_cast<size_t>(rows)), y_small(static_cast<size_t>(few));
    vq::kernels::matvec(big, x.data(), y_big.data());
    vq::kernels::matvec(small, x.data(), y_small.data());
    EXPECT_EQ(std::memcmp(y_big.data(), y_small.data(), few * sizeof(float)), 0)
        << vq::ggml_type_name(static_cast<uint32_t>(t));
    std::vector<double> want, mag;  // and the large product is still the product
    std::vector<float> W(static_cast<size_t>(rows * cols));
    vq::ggml_dequantize(t, data.data(), W.data(), rows * cols);
    expected(W, x, rows, cols, 1, want, mag);
    const std::vector<double> rounding = input_rounding(t, W, x.data(), rows, cols);
    expect_close(y_big.data(), want, mag, "fused matvec past the prefetch threshold", t, &rounding);
  }
}

// The extreme-code tests' check: with an input of whole numbers whose block maximum is the type's
// level count (row_dot_input_levels: 127, or 32767; so its rounding to levels is exact) the fused
// product and matvec_ref may differ from dequantize-then-multiply by fp32 summation only, and every
// row computed alone (dot_rows over [r, r + 1)) has the bits it has in the whole product.
void check_exact_input(GgmlType t, const vqtest::Bytes& data, int64_t rows, int64_t cols,
                       std::mt19937_64& rng) {
  const WeightMatrix w{t, data.data(), rows, cols};
  std::vector<float> W(static_cast<size_t>(rows * cols));
  vq::ggml_dequantize(t, data.data(), W.data(), rows * cols);
  std::vector<float> x(static_cast<size_t>(cols));
  const int levels = vq::kernels::detail::row_dot_input_levels(t);
  ASSERT_GT(levels, 0);
  std::uniform_int_distribution<int> level(-levels, levels);
  const float top = static_cast<float>(levels);
  for (int64_t c = 0; c < cols; ++c)
    x[static_cast<size_t>(c)] =
        c % 32 == c / 32 % 32 ? (c % 2 ? -top : top) : static_cast<float>(level(rng));
  std::vector<double> want, mag;
  expected(W, x, rows, cols, 1, want, mag);
  std::vector<float> y(static_cast<size_t>(rows)), ref(static_cast<size_t>(rows));
  vq::kernels::matvec(w, x.data(), y.data());
  expect_close(y.data(), want, mag, "fused matvec, exact input", t);
  vq::kernels::matvec_ref(w, x.data(), ref.data());
  expect_close(ref.data(), want, mag, "matvec_ref, exact input", t);
  for (int64_t r = 0; r < rows; ++r) {
    float alone = 0.0f;
    vq::kernels::detail::dot_rows(w, x.data(), r, r + 1, &alone, false);
    EXPECT_EQ(std::memcmp(&alone, y.data() + r, sizeof(float)), 0)
        << vq::ggml_type_name(static_cast<uint32_t>(t)) << " row " << r;
  }
}

// The 32-value types: blocks whose codes, high bits and mins sit at their extremes (every nibble
// 0 or 15, qh all clear, all set, or alternating; m of either sign; Q8_0 codes -128, 127, 0, -1),
// 13 rows of 7 blocks (an odd count: the int8 kernels' last pair of blocks is a lone one). The
// input is whole numbers with a block maximum of the level count, so its rounding to levels is
// exact and the fused product may differ from dequantize-then-multiply by fp32 summation only;
// every row computed on its own (dot_rows over [r, r + 1)) has the bits it has in the whole
// product.
TEST(Kernels, FusedBlock32RowDotsAreExactAtExtremeCodes) {
  const int64_t rows = 13, cols = 7 * 32;
  const uint8_t nibbles[] = {0x00, 0xFF, 0x0F, 0xF0, 0x5A};
  const uint32_t highs[] = {0u, 0xFFFFFFFFu, 0xAAAAAAAAu, 0x0000FFFFu, 0x80000001u};
  const float mins[] = {-0.75f, 0.5f, 0.0f};
  const int8_t q8_codes[] = {-128, 127, 0, -1, -128, 127};
  for (GgmlType t :
       {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1}) {
    if (!vq::kernels::detail::has_row_dot(t))
      GTEST_SKIP() << "no fused row dots in this build (needs AVX2, FMA and F16C)";
    const int64_t bb = vq::ggml_block_bytes(t);
    const bool q8 = t == GgmlType::Q8_0;
    const bool has_min = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
    const bool has_high = t == GgmlType::Q5_0 || t == GgmlType::Q5_1;
    const int64_t codes = 2 + (has_min ? 2 : 0) + (has_high ? 4 : 0);
    std::mt19937_64 rng(90 + static_cast<uint64_t>(t));
    vqtest::Bytes data(static_cast<size_t>(rows * cols / 32 * bb));
    for (int64_t k = 0; k < rows * cols / 32; ++k) {
      uint8_t* b = data.data() + k * bb;
      const uint16_t d = vq::fp32_to_fp16(0.01f * static_cast<float>(1 + k % 5));
      std::memcpy(b, &d, 2);
      if (has_min) {
        const uint16_t m = vq::fp32_to_fp16(mins[k % 3]);
        std::memcpy(b + 2, &m, 2);
      }
      if (has_high) std::memcpy(b + codes - 4, &highs[(k / 2) % 5], 4);
      if (q8) {
        for (int j = 0; j < 32; ++j)
          b[2 + j] = k % 7 == 6 ? static_cast<uint8_t>(rng())
                                : static_cast<uint8_t>(q8_codes[(k + j / 8) % 6]);
        continue;
      }
      for (int j = 0; j < 16; ++j)
        b[codes + j] = k % 7 == 6 ? static_cast<uint8_t>(rng()) : nibbles[(k + j / 8) % 5];
    }
    check_exact_input(t, data, rows, cols, rng);
  }
}

TEST(Kernels, Fp32FastPathsAreTheirDocumentedProducts) {
  using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t rows = 70, cols = 300, n = 9;  // partial panels and a partial row block
  const std::vector<float> W = randn(rows * cols, 5), X = randn(n * cols, 6);
  const Eigen::Map<const RowMatF> Wm(W.data(), rows, cols), Xm(X.data(), n, cols);
  const RowMatF want = fp32_product(W.data(), X.data(), rows, cols, n);
  RowMatF got(n, rows);
  vq::kernels::matmul(WeightMatrix::f32(W.data(), rows, cols), X.data(), n, got.data());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * static_cast<size_t>(n * rows)), 0);
  // accumulate adds each finished product to what is there
  RowMatF acc = RowMatF::Constant(n, rows, 0.25f);
  vq::kernels::matmul(WeightMatrix::f32(W.data(), rows, cols), X.data(), n, acc.data(), true);
  const RowMatF want_acc = (want.array() + 0.25f).matrix();
#if defined(__AVX512F__)
  EXPECT_EQ(std::memcmp(acc.data(), want_acc.data(), sizeof(float) * static_cast<size_t>(n * rows)),
            0);
#else
  EXPECT_TRUE(acc.isApprox(want_acc, 1e-5f));
#endif
  const Eigen::VectorXf wv = Wm * Eigen::Map<const Eigen::VectorXf>(X.data(), cols);
  Eigen::VectorXf gv(rows);
  vq::kernels::matvec(WeightMatrix::f32(W.data(), rows, cols), X.data(), gv.data());
  EXPECT_EQ(std::memcmp(gv.data(), wv.data(), sizeof(float) * static_cast<size_t>(rows)), 0);
}

TEST(Kernels, UnalignedFp32AndBadShapesAreHandled) {
  // fp32 weights at an odd address (safetensors data need not be aligned) go through the
  // decoding path and give the same products.
  const int64_t rows = 8, cols = 32;
  const std::vector<float> W = randn(rows * cols, 8), x = randn(cols, 9);
  std::vector<uint8_t> buf(W.size() * 4 + 1);
  std::memcpy(buf.data() + 1, W.data(), W.size() * 4);
  std::vector<float> a(rows), b(rows);
  vq::kernels::matvec(WeightMatrix{GgmlType::F32, buf.data() + 1, rows, cols}, x.data(), a.data());
  vq::kernels::matvec_ref(WeightMatrix::f32(W.data(), rows, cols), x.data(), b.data());
  for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(a[r], b[r], 1e-5f);
  const vqtest::Bytes q = vqtest::random_stored(GgmlType::Q8_0, 64, 1);
  EXPECT_THROW(
      vq::kernels::matvec(WeightMatrix{GgmlType::Q8_0, q.data(), 2, 40}, x.data(), a.data()),
      vq::InvalidArgument);  // 40 is not a whole number of 32-value blocks
  EXPECT_THROW(
      vq::kernels::dequantize_row(WeightMatrix{GgmlType::Q8_0, q.data(), 2, 32}, 2, a.data()),
      vq::InvalidArgument);
}

// Q4_K / Q5_K with their 6-bit scales and mins, nibbles and (Q5_K) 5th bits at the extremes:
// scale bytes all 0xFF (every scale and min 63), all 0, all 0x3F or random, nibble bytes 0x00,
// 0xFF, 0x0F, 0xF0 or random, qh bytes all clear, all set, alternating or random (so every chunk's
// low and high nibbles see both values of their bit), dmin of either sign or zero; 11 rows of 3
// super-blocks; then Q6_K the same way (below). The input is whole numbers with a block maximum of
// the type's level count (127 for the K-quants), so it is rounded exactly and the
// fused product may differ from dequantize-then-multiply by fp32 summation only; every row computed
// alone has the bits it has in the whole product.
TEST(Kernels, FusedKQuantRowDotsAreExactAtExtremeCodes) {
  const int64_t rows = 11, cols = 3 * 256;
  const uint8_t scale_bytes[] = {0xFF, 0x00, 0x3F};
  const uint8_t nibbles[] = {0x00, 0xFF, 0x0F, 0xF0, 0x5A};
  const uint8_t highs[] = {0x00, 0xFF, 0xAA, 0x55, 0x0F};
  const float dmins[] = {0.03f, -0.02f, 0.0f};
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K}) {
    if (!vq::kernels::detail::has_row_dot(t))
      GTEST_SKIP() << "no fused row dots in this build (needs AVX2, FMA and F16C)";
    const bool five = t == GgmlType::Q5_K;
    const int64_t bb = vq::ggml_block_bytes(t), nib = five ? 48 : 16;
    std::mt19937_64 rng(70 + static_cast<uint64_t>(t));
    vqtest::Bytes data(static_cast<size_t>(rows * cols / 256 * bb));
    for (int64_t k = 0; k < rows * cols / 256; ++k) {
      uint8_t* b = data.data() + k * bb;
      const uint16_t d = vq::fp32_to_fp16(0.001f * static_cast<float>(1 + k % 5));
      const uint16_t dmin = vq::fp32_to_fp16(dmins[k % 3]);
      std::memcpy(b, &d, 2);
      std::memcpy(b + 2, &dmin, 2);
      for (int j = 0; j < 12; ++j)
        b[4 + j] = k % 4 < 3 ? scale_bytes[k % 4] : static_cast<uint8_t>(rng());
      if (five)
        for (int l = 0; l < 32; ++l)
          b[16 + l] = k % 6 == 5 ? static_cast<uint8_t>(rng()) : highs[(k + l / 16) % 5];
      for (int j = 0; j < 128; ++j)
        b[nib + j] = k % 7 == 6 ? static_cast<uint8_t>(rng()) : nibbles[(k / 2 + j / 32) % 5];
    }
    check_exact_input(t, data, rows, cols, rng);
  }
  // Q6_K: ql nibbles and qh bit pairs at the extremes (every code 0, 63 or mixed), int8 scales
  // of -128, 127, 0 or random, d of either sign.
  const GgmlType t = GgmlType::Q6_K;
  if (!vq::kernels::detail::has_row_dot(t)) return;
  const int64_t bb = vq::ggml_block_bytes(t);
  std::mt19937_64 rng(76);
  vqtest::Bytes data(static_cast<size_t>(rows * cols / 256 * bb));
  const int8_t scales[] = {-128, 127, 0};
  for (int64_t k = 0; k < rows * cols / 256; ++k) {
    uint8_t* b = data.data() + k * bb;
    for (int j = 0; j < 128; ++j)
      b[j] = k % 7 == 6 ? static_cast<uint8_t>(rng()) : nibbles[(k / 2 + j / 32) % 5];
    for (int j = 0; j < 64; ++j)
      b[128 + j] = k % 6 == 5 ? static_cast<uint8_t>(rng()) : highs[(k + j / 16) % 5];
    for (int j = 0; j < 16; ++j)
      b[192 + j] = static_cast<uint8_t>(k % 4 < 3 ? scales[k % 4] : static_cast<int8_t>(rng()));
    const uint16_t d = vq::fp32_to_fp16((k % 2 ? -0.001f : 0.002f) * static_cast<float>(1 + k % 3));
    std::memcpy(b + 208, &d, 2);
  }
  check_exact_input(t, data, rows, cols, rng);
}

}  // namespace

// The products are split by output rows across the thread pool; every row must come out with the
// same bits whatever the thread count and the piece size (min_piece_macs 1: every piece one unit
// of rows), and the fp32 path equal to one Eigen product over the whole matrix (the split is
// invisible). Shapes with several pieces at the default size and remainders of 1 and a few rows.
TEST(Kernels, BitIdenticalForAnyThreadCount) {
  using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int before = vq::thread_count();
  const int64_t dflt = vq::min_piece_macs();
  struct Shape {
    int64_t rows, cols, n;
  };
  for (const Shape& sh :
       {Shape{4100, 1024, 1}, Shape{1025, 2048, 2}, Shape{700, 256, 33}, Shape{97, 256, 5}}) {
    for (GgmlType t : kTypes) {
      const vqtest::Bytes data =
          vqtest::random_stored(t, sh.rows * sh.cols, 21 + static_cast<uint64_t>(t));
      const WeightMatrix w{t, data.data(), sh.rows, sh.cols};
      const std::vector<float> X = randn(sh.n * sh.cols, 4);
      std::vector<float> mv1, mm1;
      for (const auto& [threads, piece] : std::vector<std::pair<int, int64_t>>{
               {1, dflt}, {2, dflt}, {3, dflt}, {8, dflt}, {1, 1}, {2, 1}, {3, 1}}) {
        vq::set_thread_count(threads);
        vq::set_min_piece_macs(piece);
        std::vector<float> mv(static_cast<size_t>(sh.rows)),
            mm(static_cast<size_t>(sh.n * sh.rows));
        vq::kernels::matvec(w, X.data(), mv.data());
        vq::kernels::matmul(w, X.data(), sh.n, mm.data());
        const std::string what = std::string(vq::ggml_type_name(static_cast<uint32_t>(t))) + " " +
                                 std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + " n " +
                                 std::to_string(sh.n) + ", " + std::to_string(threads) +
                                 " threads, piece " + std::to_string(piece);
        if (t == GgmlType::F32) {
          const Eigen::Map<const RowMatF> Wm(reinterpret_cast<const float*>(data.data()), sh.rows,
                                             sh.cols),
              Xm(X.data(), sh.n, sh.cols);
          const RowMatF want = fp32_product(reinterpret_cast<const float*>(data.data()), X.data(),
                                            sh.rows, sh.cols, sh.n);
          (void)Xm;
          const Eigen::VectorXf wv = Wm * Eigen::Map<const Eigen::VectorXf>(X.data(), sh.cols);
          EXPECT_EQ(std::memcmp(mm.data(), want.data(), mm.size() * sizeof(float)), 0)
              << "matmul vs its reference product, " << what;
          EXPECT_EQ(std::memcmp(mv.data(), wv.data(), mv.size() * sizeof(float)), 0)
              << "matvec vs one Eigen product, " << what;
        }
        if (mv1.empty()) {
          mv1 = mv;
          mm1 = mm;
          continue;
        }
        EXPECT_EQ(std::memcmp(mv.data(), mv1.data(), mv.size() * sizeof(float)), 0)
            << "matvec " << what;
        EXPECT_EQ(std::memcmp(mm.data(), mm1.data(), mm.size() * sizeof(float)), 0)
            << "matmul " << what;
      }
    }
  }
  vq::set_thread_count(before);
  vq::set_min_piece_macs(dflt);
}

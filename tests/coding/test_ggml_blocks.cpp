// llama.cpp q8_0 / q4_0 blocks: hand-checked bytes (layout, rounding rule, nibble order), error
// bounds on random rows, partial last block, zero block.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "coding/ggml_blocks.hpp"
#include "core/rng.hpp"
#include "veloxquant/tensor.hpp"

namespace vq::coding {
namespace {

TEST(CodingGgml, BlockSizesAreLlamaCpps) {
  EXPECT_EQ(ggml_block_bytes(GgmlType::Q8_0), 34);
  EXPECT_EQ(ggml_block_bytes(GgmlType::Q4_0), 18);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q8_0, 256), 8 * 34);  // 8.5 bits per value
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_0, 256), 8 * 18);  // 4.5 bits per value
  EXPECT_EQ(ggml_row_blocks(40), 2);
}

TEST(CodingGgml, Q8_0HandCheckedBytes) {
  float x[32] = {};
  x[0] = 127.f;    // amax: d = 1, stored as fp16 0x3C00
  x[1] = 2.5f;     // roundf: half away from zero -> 3
  x[2] = -2.5f;    // -> -3
  x[3] = 0.49f;    // -> 0
  x[4] = -126.6f;  // -> -127
  uint8_t b[34];
  ggml_quantize_row(GgmlType::Q8_0, x, 32, b);
  const std::vector<uint8_t> head(b, b + 7);
  EXPECT_EQ(head, (std::vector<uint8_t>{0x00, 0x3C, 0x7F, 0x03, 0xFD, 0x00, 0x81}));
  for (int j = 7; j < 34; ++j) EXPECT_EQ(b[j], 0) << j;
  float y[32];
  ggml_dequantize_row(GgmlType::Q8_0, b, 32, y);
  EXPECT_EQ(y[1], 3.f);
  EXPECT_EQ(y[4], -127.f);
}

TEST(CodingGgml, Q4_0HandCheckedBytes) {
  float x[32] = {};
  x[0] = -8.f;     // largest magnitude, negative: d = -8 / -8 = 1
  x[1] = 3.4f;     // trunc(11.9) = 11
  x[2] = 7.9f;     // trunc(16.4) = 16 -> clipped to 15
  x[3] = -0.6f;    // trunc(7.9) = 7
  x[16] = 5.0f;    // trunc(13.5) = 13 (high nibble of byte 0)
  x[17] = -7.99f;  // trunc(0.51) = 0 (high nibble of byte 1)
  uint8_t b[18];
  ggml_quantize_row(GgmlType::Q4_0, x, 32, b);
  const std::vector<uint8_t> got(b, b + 18);
  std::vector<uint8_t> expect(18, 0x88);  // zeros quantize to 8 in both nibbles
  const uint8_t first[6] = {0x00, 0x3C, 0xD0, 0x0B, 0x8F, 0x87};
  for (int j = 0; j < 6; ++j) expect[static_cast<size_t>(j)] = first[j];
  EXPECT_EQ(got, expect);
  float y[32];
  ggml_dequantize_row(GgmlType::Q4_0, b, 32, y);
  EXPECT_EQ(y[0], -8.f);
  EXPECT_EQ(y[1], 3.f);
  EXPECT_EQ(y[2], 7.f);
  EXPECT_EQ(y[3], -1.f);
  EXPECT_EQ(y[16], 5.f);
  EXPECT_EQ(y[17], -8.f);
  EXPECT_EQ(y[5], 0.f);
  // Positive extreme: d = 8 / -8 = -1, so 8 maps to code 0 and back to +8.
  float p[32] = {};
  p[5] = 8.f;
  p[6] = 3.f;
  ggml_quantize_row(GgmlType::Q4_0, p, 32, b);
  EXPECT_EQ(b[0] | (b[1] << 8), fp32_to_fp16(-1.f));
  ggml_dequantize_row(GgmlType::Q4_0, b, 32, y);
  EXPECT_EQ(y[5], 8.f);
  EXPECT_EQ(y[6], 3.f);
}

TEST(CodingGgml, RandomRowsStayWithinTheirErrorBounds) {
  Rng rng(17);
  for (int rep = 0; rep < 200; ++rep) {
    const int64_t k = 32 * (1 + static_cast<int64_t>(rng.below(4)));
    std::vector<float> x(static_cast<size_t>(k)), y(static_cast<size_t>(k));
    const double scale = std::exp(rng.uniform(-4, 4));
    for (auto& v : x) v = static_cast<float>(rng.normal() * scale);
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0}) {
      std::vector<uint8_t> buf(static_cast<size_t>(ggml_row_bytes(t, k)));
      ggml_quantize_row(t, x.data(), k, buf.data());
      ggml_dequantize_row(t, buf.data(), k, y.data());
      for (int64_t blk = 0; blk < k / 32; ++blk) {
        float amax = 0;
        for (int j = 0; j < 32; ++j)
          amax = std::max(amax, std::fabs(x[static_cast<size_t>(blk * 32 + j)]));
        // q8_0: half a step of amax/127, plus the fp16 rounding of d over 127 steps.
        // q4_0: up to one step of amax/8 (the top code is clipped from 16 to 15), plus fp16 of d.
        const double step = t == GgmlType::Q8_0 ? amax / 127.0 : amax / 8.0;
        const double bound = t == GgmlType::Q8_0 ? step * (0.5 + 127.0 / 2048) + 1e-7 * amax
                                                 : step * (1.0 + 8.0 / 2048) + 1e-7 * amax;
        for (int j = 0; j < 32; ++j) {
          const size_t i = static_cast<size_t>(blk * 32 + j);
          ASSERT_LE(std::fabs(x[i] - y[i]), bound) << "type " << int(t) << " value " << x[i];
        }
      }
    }
  }
}

TEST(CodingGgml, PartialLastBlockCostsAWholeBlockAndMatchesZeroPadding) {
  Rng rng(23);
  std::vector<float> x(40);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  std::vector<float> padded(64, 0.f);
  std::copy(x.begin(), x.end(), padded.begin());
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0}) {
    std::vector<uint8_t> a(static_cast<size_t>(ggml_row_bytes(t, 40)));
    std::vector<uint8_t> b(static_cast<size_t>(ggml_row_bytes(t, 64)));
    ASSERT_EQ(a.size(), b.size());
    ggml_quantize_row(t, x.data(), 40, a.data());
    ggml_quantize_row(t, padded.data(), 64, b.data());
    EXPECT_EQ(a, b);
    std::vector<float> y(40, 123.f);
    ggml_dequantize_row(t, a.data(), 40, y.data());
    for (size_t i = 0; i < 40; ++i) EXPECT_LT(std::fabs(y[i] - x[i]), 0.5f);
  }
}

TEST(CodingGgml, ZeroBlockDecodesToZero) {
  const std::vector<float> x(32, 0.f);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0}) {
    std::vector<uint8_t> b(static_cast<size_t>(ggml_block_bytes(t)));
    ggml_quantize_row(t, x.data(), 32, b.data());
    // d = 0 (q4_0 stores -0: 0 / -8, as ggml does).
    EXPECT_EQ((b[0] | (b[1] << 8)) & 0x7FFF, 0);
    std::vector<float> y(32, 1.f);
    ggml_dequantize_row(t, b.data(), 32, y.data());
    for (float v : y) EXPECT_EQ(v, 0.f);
  }
}

}  // namespace
}  // namespace vq::coding

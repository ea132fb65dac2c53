#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "veloxquant/errors.hpp"
#include "veloxquant/tensor.hpp"

using vq::fp16_to_fp32;
using vq::fp32_to_fp16;

TEST(Fp16, EveryFiniteHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f = fp16_to_fp32(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
      continue;
    }
    ASSERT_EQ(fp32_to_fp16(f), bits) << "pattern 0x" << std::hex << h;
  }
}

TEST(Fp16, KnownValuesAndRounding) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);  // rounds up to inf
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(5.960464477539063e-08f), 0x0001);  // smallest subnormal
  // 1 + 2^-11 is exactly halfway between 1 and 1 + 2^-10: ties to even -> 1.0
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  // 1 + 3 * 2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even): rounds up
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(fp32_to_fp16(1e-9f), 0x0000);
}

TEST(Bf16, RoundTrip) {
  EXPECT_EQ(vq::bf16_to_fp32(vq::fp32_to_bf16(1.5f)), 1.5f);
  EXPECT_EQ(vq::bf16_to_fp32(vq::fp32_to_bf16(-3.0f)), -3.0f);
}

TEST(Tensor, ShapeAndIndexing) {
  vq::Tensor t(2, 3, 4, 5);
  EXPECT_EQ(t.numel(), 120);
  t.at(1, 2, 3, 4) = 7.0f;
  EXPECT_EQ(t.data()[119], 7.0f);
  EXPECT_EQ(t.row(1, 2, 3)[4], 7.0f);
  EXPECT_EQ(t.shape().str(), "[2, 3, 4, 5]");
}

TEST(Tensor, FromFp16Exact) {
  std::vector<uint16_t> h = {0x3C00, 0xC000, 0x0001, 0x7BFF};
  auto t = vq::Tensor::from_fp16(h.data(), 1, 1, 1, 4);
  EXPECT_EQ(t.at(0, 0, 0, 0), 1.0f);
  EXPECT_EQ(t.at(0, 0, 0, 1), -2.0f);
  EXPECT_EQ(t.at(0, 0, 0, 3), 65504.0f);
  EXPECT_EQ(t.to_fp16(), h);
}

TEST(Tensor, CheckFiniteNamesTheElement) {
  vq::Tensor t(1, 2, 3, 4);
  t.at(0, 1, 2, 3) = std::numeric_limits<float>::quiet_NaN();
  try {
    t.check_finite("keys");
    FAIL() << "expected InvalidArgument";
  } catch (const vq::InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("keys"), std::string::npos);
    EXPECT_NE(msg.find("h=1, s=2, d=3"), std::string::npos) << msg;
  }
}

TEST(Tensor, RejectsNegativeDims) {
  EXPECT_THROW(vq::Tensor(1, -1, 2, 3), vq::InvalidArgument);
}

TEST(Tensor, SliceTokens) {
  vq::Tensor t(1, 2, 5, 2);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<float>(i);
  auto s = t.slice_tokens(1, 3);
  EXPECT_EQ(s.shape(), (vq::Shape4{1, 2, 3, 2}));
  EXPECT_EQ(s.at(0, 1, 0, 0), t.at(0, 1, 1, 0));
  EXPECT_THROW(t.slice_tokens(3, 3), vq::InvalidArgument);
}

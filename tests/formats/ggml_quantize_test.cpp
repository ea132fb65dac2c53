// ggml_quantize: fp32 -> F16 / BF16 / Q8_0 / Q4_K, read back by ggml_dequantize.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "coding/ggml_blocks.hpp"
#include "core/rng.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/gguf.hpp"

namespace {

std::vector<float> random_values(int64_t n, uint64_t seed, double lo, double hi) {
  vq::Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = static_cast<float>(rng.uniform(lo, hi));
  return x;
}

std::vector<float> round_trip(vq::GgmlType t, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(vq::ggml_row_bytes(t, n));
  vq::ggml_quantize(t, x.data(), q.data(), n);
  std::vector<float> y(x.size());
  vq::ggml_dequantize(t, q.data(), y.data(), n);
  return y;
}

TEST(GgmlQuantize, Q8_0BytesAreTheReferenceQuantizers) {
  const auto x = random_values(32 * 40, 7, -3.0, 2.0);
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> ours(vq::ggml_row_bytes(vq::GgmlType::Q8_0, n));
  std::vector<uint8_t> ref(
      static_cast<size_t>(vq::coding::ggml_row_bytes(vq::coding::GgmlType::Q8_0, n)));
  vq::ggml_quantize(vq::GgmlType::Q8_0, x.data(), ours.data(), n);
  vq::coding::ggml_quantize_row(vq::coding::GgmlType::Q8_0, x.data(), n, ref.data());
  EXPECT_EQ(ours, ref);
}

TEST(GgmlQuantize, HalfTypesRoundToNearestEven) {
  // 1 + 2^-8 and 1 + 3 * 2^-8 lie halfway between two bf16 values: ties go to the even
  // mantissa, 1.0 and 1 + 2^-6.
  const std::vector<float> x{1.0f + 0x1.0p-8f, 1.0f + 3 * 0x1.0p-8f, -2.5f, 0.0f};
  const auto y = round_trip(vq::GgmlType::BF16, x);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f + 0x1.0p-6f);
  EXPECT_EQ(y[2], -2.5f);
  EXPECT_EQ(y[3], 0.0f);
  const auto h = round_trip(vq::GgmlType::F16, x);
  EXPECT_EQ(h[0], 1.0f + 0x1.0p-8f);  // exact in fp16 (10 mantissa bits)
  EXPECT_EQ(h[2], -2.5f);
  const auto f = round_trip(vq::GgmlType::F32, x);
  EXPECT_EQ(f, x);
}

TEST(GgmlQuantize, Q4_KStaysWithinAStepOfEachSubBlock) {
  for (const auto& [lo, hi] : {std::pair{-1.0, 1.0}, std::pair{0.5, 2.0}, std::pair{-4.0, -1.0}}) {
    const auto x = random_values(256 * 16, 11, lo, hi);
    const auto y = round_trip(vq::GgmlType::Q4_K, x);
    double err2 = 0, sig2 = 0;
    for (size_t s = 0; s < x.size() / 32; ++s) {
      float mn = 0, mx = x[32 * s];  // the fit's range: the minimum is taken at most 0
      for (int j = 0; j < 32; ++j) {
        mn = std::fmin(mn, x[32 * s + j]);
        mx = std::fmax(mx, x[32 * s + j]);
      }
      const float step = (mx - mn) / 15.0f;
      for (int j = 0; j < 32; ++j) {
        const float e = std::fabs(y[32 * s + j] - x[32 * s + j]);
        ASSERT_LE(e, step) << "range [" << lo << ", " << hi << "] value " << 32 * s + j;
        err2 += double(e) * e;
        sig2 += double(x[32 * s + j]) * x[32 * s + j];
      }
    }
    EXPECT_LT(std::sqrt(err2 / sig2), 0.12) << lo << " " << hi;
  }
}

TEST(GgmlQuantize, ZerosStayZero) {
  const std::vector<float> x(256, 0.0f);
  EXPECT_EQ(round_trip(vq::GgmlType::Q4_K, x), x);
  EXPECT_EQ(round_trip(vq::GgmlType::Q8_0, std::vector<float>(32, 0.0f)),
            std::vector<float>(32, 0.0f));
}

TEST(GgmlQuantize, RefusesOtherTypesAndPartialBlocks) {
  std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> out(1024);
  try {
    vq::ggml_quantize(vq::GgmlType::Q6_K, x.data(), out.data(), 256);
    FAIL() << "Q6_K was accepted";
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("Q6_K"), std::string::npos) << e.what();
  }
  try {
    vq::ggml_quantize(vq::GgmlType::Q4_K, x.data(), out.data(), 100);
    FAIL() << "100 values were accepted";
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("100"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(vq::ggml_type_quantizable(vq::GgmlType::Q4_0));
  EXPECT_TRUE(vq::ggml_type_quantizable(vq::GgmlType::Q4_K));
}

}  // namespace

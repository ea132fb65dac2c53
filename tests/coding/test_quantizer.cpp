// Affine min/max quantizer: levels, clipping, error bound, constant input.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "coding/quantizer.hpp"
#include "core/rng.hpp"

namespace vq::coding {
namespace {

TEST(CodingQuantizer, LevelsAreTwoToTheBitsMinusOne) {
  for (int b = 1; b <= 8; ++b) EXPECT_EQ(quant_levels(b), (1 << b) - 1);
}

TEST(CodingQuantizer, ErrorAtMostHalfAStepAndEndpointsExact) {
  Rng rng(7);
  std::vector<float> x(200);
  for (auto& v : x) v = static_cast<float>(rng.normal() * 3.0 + 1.0);
  for (int b = 1; b <= 8; ++b) {
    const AffineParams p = fit_affine(x.data(), 200, b);
    std::vector<uint8_t> c(200);
    std::vector<float> y(200);
    quantize_affine(x.data(), 200, p, b, c.data());
    dequantize_affine(c.data(), 200, p, y.data());
    float lo = x[0], hi = x[0];
    for (float v : x) lo = std::min(lo, v), hi = std::max(hi, v);
    EXPECT_FLOAT_EQ(p.min, lo);
    EXPECT_NEAR(p.scale, (hi - lo) / quant_levels(b), 1e-6 * (hi - lo));
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_LE(c[i], quant_levels(b));
      EXPECT_LE(std::abs(x[i] - y[i]), 0.5f * p.scale * (1 + 1e-4f) + 1e-6f) << "b=" << b;
    }
  }
}

TEST(CodingQuantizer, CodesAreClippedOutsideTheFittedRange) {
  const float fit[4] = {0.f, 1.f, 2.f, 3.f};
  const AffineParams p = fit_affine(fit, 4, 2);  // scale 1, levels 3
  const float probe[4] = {-10.f, 1.4f, 2.6f, 50.f};
  uint8_t c[4];
  quantize_affine(probe, 4, p, 2, c);
  EXPECT_EQ(c[0], 0);
  EXPECT_EQ(c[1], 1);
  EXPECT_EQ(c[2], 3);
  EXPECT_EQ(c[3], 3);
}

TEST(CodingQuantizer, ConstantInputFloorsTheScaleAndIsExact) {
  std::vector<float> x(17, -2.75f);
  const AffineParams p = fit_affine(x.data(), 17, 4);
  EXPECT_EQ(p.scale, kMinScale);
  std::vector<uint8_t> c(17);
  std::vector<float> y(17);
  quantize_affine(x.data(), 17, p, 4, c.data());
  dequantize_affine(c.data(), 17, p, y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(c[i], 0);
    EXPECT_EQ(y[i], -2.75f);
  }
}

TEST(CodingQuantizer, MseFallsWithBitsAndZeroBitsCostsTheEnergy) {
  Rng rng(3);
  std::vector<float> x(512);
  double energy = 0;
  for (auto& v : x) {
    v = static_cast<float>(rng.normal());
    energy += static_cast<double>(v) * v;
  }
  EXPECT_NEAR(affine_mse(x.data(), 512, 0), energy / 512, 1e-9);
  for (int b = 2; b <= 8; ++b)
    EXPECT_LT(affine_mse(x.data(), 512, b), affine_mse(x.data(), 512, b - 1)) << b;
}

}  // namespace
}  // namespace vq::coding

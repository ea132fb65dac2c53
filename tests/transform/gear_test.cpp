// gear: each component reduces the error: 2-bit alone > + low-rank residual > + sparse outliers.
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/codec.hpp"

namespace {

constexpr int64_t kD = 32;

/// Correlated channels (a rank-3 structure plus noise) with a few large outliers.
vq::Tensor heavy_tailed(int64_t S, uint64_t seed) {
  vq::Rng rng(seed);
  vq::Tensor x(1, 2, S, kD);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t s = 0; s < S; ++s) {
      const double a = rng.normal(), b = rng.normal(), c = rng.normal();
      for (int64_t d = 0; d < kD; ++d) {
        double v =
            a * std::sin(0.3 * d) + b * std::cos(0.7 * d) + 0.5 * c * (d % 3) + 0.2 * rng.normal();
        if (rng.uniform() < 0.01) v *= 25.0;
        x.at(0, h, s, d) = static_cast<float>(v);
      }
    }
  return x;
}

double rel_err(const std::string& spec, const vq::Tensor& x, int64_t* bytes = nullptr) {
  auto c = vq::make_codec(spec, kD);
  const auto blk = c->encode(x);
  if (bytes) *bytes = blk.total_bytes();
  for (const auto& s : blk.sections)
    EXPECT_EQ(s.breakdown.total(), static_cast<int64_t>(s.bytes.size()));
  const auto y = c->decode(blk);
  double e = 0, n = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    e += (y.data()[i] - x.data()[i]) * static_cast<double>(y.data()[i] - x.data()[i]);
    n += static_cast<double>(x.data()[i]) * x.data()[i];
  }
  return e / n;
}

TEST(GearTransform, EachComponentReducesError) {
  const auto x = heavy_tailed(256, 61);
  int64_t b0 = 0, b1 = 0, b2 = 0;
  const double quant_only = rel_err("gear:rank=0,outlier_ratio=0", x, &b0);
  const double low_rank = rel_err("gear:rank=4,outlier_ratio=0", x, &b1);
  const double full = rel_err("gear:rank=4,outlier_ratio=0.01", x, &b2);
  EXPECT_GT(quant_only, 1.2 * low_rank);
  EXPECT_GT(low_rank, 1.2 * full);
  EXPECT_LT(b0, b1);  // each component costs bytes
  EXPECT_LT(b1, b2);
}

TEST(GearTransform, OutliersAreExactAtFp16) {
  vq::Tensor x(1, 1, 64, kD);
  vq::Rng rng(62);
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = static_cast<float>(rng.normal());
  x.at(0, 0, 5, 7) = 300.0f;
  x.at(0, 0, 40, 2) = -250.0f;
  // 2 of 2048 entries: ratio 0.001 keeps exactly round(2.048) = 2 outliers.
  auto c = vq::make_codec("gear:rank=0,outlier_ratio=0.001", kD);
  const auto y = c->decode(c->encode(x));
  EXPECT_EQ(y.at(0, 0, 5, 7), 300.0f);
  EXPECT_EQ(y.at(0, 0, 40, 2), -250.0f);
  // Without the outliers the 2-bit scale of those tokens blows up.
  auto c0 = vq::make_codec("gear:rank=0,outlier_ratio=0", kD);
  const auto y0 = c0->decode(c0->encode(x));
  double e = 0, e0 = 0;
  for (int64_t d = 0; d < kD; ++d) {
    e += std::fabs(y.at(0, 0, 5, d) - x.at(0, 0, 5, d));
    e0 += std::fabs(y0.at(0, 0, 5, d) - x.at(0, 0, 5, d));
  }
  EXPECT_GT(e0, 5 * e);
}

}  // namespace

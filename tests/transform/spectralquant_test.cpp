// spectralquant: the signal/noise split at round(participation ratio) of the PCA spectrum.
#include <gtest/gtest.h>

#include "codecs/pca_codec.hpp"
#include "store/store_util.hpp"
#include "transform/pca_coder.hpp"

#include <cmath>

#include "core/rng.hpp"
#include "transform/family_coders.hpp"
#include "transform/transform_cache.hpp"
#include "veloxquant/cache.hpp"

namespace {

constexpr int64_t kD = 16;

TEST(SpectralquantTransform, ParticipationRatio) {
  using namespace vq::transform;
  EXPECT_DOUBLE_EQ(participation_ratio(std::vector<double>(8, 2.0)), 8.0);
  EXPECT_DOUBLE_EQ(participation_ratio({5.0, 0, 0, 0}), 1.0);
  EXPECT_EQ(spectral_split({3, 3, 3, 0, 0, 0}), 3);
  // (4 + 1 + 1)^2 / (16 + 1 + 1) = 2
  EXPECT_EQ(spectral_split({4, 1, 1}), 2);
  EXPECT_EQ(spectral_split({0, 0, 0}), 1);  // empty spectrum: one signal component
  EXPECT_EQ(spectral_bits({4, 1, 1}, 6, 0), (std::vector<int>{6, 6, 0}));
}

TEST(SpectralquantTransform, PlantedSpectrumSplit) {
  // Three strong directions (std 10) over 13 weak ones (std 0.3): PR = (300 + 13 * 0.09)^2 /
  // (3 * 10^4 + 13 * 0.0081) ~ 3.02, so exactly three signal components.
  vq::Rng rng(41);
  const int64_t S = 400;
  vq::Tensor K(1, 1, S, kD);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t d = 0; d < kD; ++d)
      K.at(0, 0, s, d) = static_cast<float>((d < 3 ? 10.0 : 0.3) * rng.normal());
  auto cache =
      vq::make_cache(vq::CacheConfig::parse("spectralquant:signal_bits=5,noise_bits=1"), kD);
  cache->update(K, K);
  vq::transform::PcaSettings ps;  // the variances do not depend on the allocation rule
  ps.rule = vq::transform::AllocRule::Uniform;
  ps.bit_budget = kD;
  const vq::transform::PcaModel model = vq::transform::fit_pca_model(K.data(), S, kD, ps);
  const double pr = vq::transform::participation_ratio(model.variances);
  EXPECT_NEAR(pr, 3.0, 0.3);
  std::vector<int> want(kD, 1);
  want[0] = want[1] = want[2] = 5;
  const auto& w = storetest::codec<vq::codecs::PcaCodec>(*cache, 0, 0, 0).widths();
  EXPECT_EQ(std::vector<int>(w.begin(), w.end()), want);
  // Moving the noise floor up moves the split: 8 directions of std 10 -> PR ~ 8.
  for (int64_t s = 0; s < S; ++s)
    for (int64_t d = 3; d < 8; ++d) K.at(0, 0, s, d) = static_cast<float>(10.0 * rng.normal());
  auto c8 = vq::make_cache(vq::CacheConfig::parse("spectralquant"), kD);
  c8->update(K, K);
  int n_sig = 0;
  for (int b : storetest::codec<vq::codecs::PcaCodec>(*c8, 0, 0, 1).widths())
    n_sig += b == 4 ? 1 : 0;
  EXPECT_EQ(n_sig, 8);
}

}  // namespace

// palu: top 25% of the kept latent components at hi_bits, the rest at lo_bits, for K and V.
#include <gtest/gtest.h>

#include "test_util.hpp"
#include "transform/family_coders.hpp"
#include "transform/transform_cache.hpp"
#include "veloxquant/cache.hpp"

namespace {

constexpr int64_t kD = 16;

TEST(PaluTransform, SplitRule) {
  using vq::transform::palu_bits;
  EXPECT_EQ(palu_bits(16, 0, 4, 2),
            (std::vector<int>{4, 4, 4, 4, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}));
  EXPECT_EQ(palu_bits(8, 6, 4, 2), (std::vector<int>{4, 2, 2, 2, 2, 2, 0, 0}));
  EXPECT_EQ(palu_bits(3, 0, 4, 2), (std::vector<int>{4, 2, 2}));  // at least one hi component
  EXPECT_EQ(palu_bits(0, 0, 4, 2), std::vector<int>{});
}

TEST(PaluTransform, CacheSplitsKeysAndValues) {
  for (const char* spec : {"palu", "palu:rank=8"}) {
    auto cache = vq::make_cache(vq::CacheConfig::parse(spec), kD);
    cache->update(vqtest::random_tensor(1, 1, 200, kD, 31), vqtest::random_tensor(1, 1, 200, kD, 32));
    auto* tc = dynamic_cast<vq::transform::TransformCache*>(cache.get());
    ASSERT_NE(tc, nullptr);
    const bool full = std::string(spec) == "palu";
    for (int kv = 0; kv < 2; ++kv) {
      auto* c = dynamic_cast<const vq::transform::FixedRulePcaCoder*>(tc->encoder(0, 0, kv));
      ASSERT_NE(c, nullptr);
      const auto& b = c->bits();
      ASSERT_EQ(b.size(), static_cast<size_t>(kD));
      const int64_t kept = full ? kD : 8, hi = kept / 4;
      for (int64_t j = 0; j < kD; ++j)
        EXPECT_EQ(b[static_cast<size_t>(j)], j < hi ? 4 : (j < kept ? 2 : 0)) << spec << " " << j;
      EXPECT_EQ(tc->section(0, 0, kv).bytes[2], kept);  // stored surviving components
    }
  }
}

TEST(PaluTransform, LowerRankCostsFewerBytesAndMoreError) {
  const auto K = vqtest::random_tensor(1, 1, 256, kD, 33);
  double err[2], bytes[2];
  int i = 0;
  for (const char* spec : {"palu", "palu:rank=4"}) {
    auto cache = vq::make_cache(vq::CacheConfig::parse(spec), kD);
    cache->update(K, K);
    const auto r = cache->fetch();
    double e = 0;
    for (int64_t n = 0; n < K.numel(); ++n) {
      const double d = r.keys.data()[n] - K.data()[n];
      e += d * d;
    }
    err[i] = e;
    bytes[i++] = cache->stats().kept_bytes;
  }
  EXPECT_LT(bytes[1], bytes[0]);
  EXPECT_GT(err[1], err[0]);
}

}  // namespace

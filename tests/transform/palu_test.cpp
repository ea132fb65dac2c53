// palu: top 25% of the kept latent components at hi_bits, the rest at lo_bits, for K and V.
#include <gtest/gtest.h>

#include "codecs/pca_codec.hpp"
#include "store/store_util.hpp"

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
    cache->update(vqtest::random_tensor(1, 1, 200, kD, 31),
                  vqtest::random_tensor(1, 1, 200, kD, 32));
    const bool full = std::string(spec) == "palu";
    for (int kv = 0; kv < 2; ++kv) {
      const auto& c = storetest::codec<vq::codecs::PcaCodec>(*cache, 0, 0, kv);
      const auto& b = c.widths();  // surviving components only
      const int64_t kept = full ? kD : 8, hi = kept / 4;
      ASSERT_EQ(b.size(), static_cast<size_t>(kept)) << spec;
      for (int64_t j = 0; j < kept; ++j)
        EXPECT_EQ(b[static_cast<size_t>(j)], j < hi ? 4 : 2) << spec << " " << j;
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

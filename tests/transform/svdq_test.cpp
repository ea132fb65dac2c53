// svdq: the (8,4,2,1,1,0,0,0) schedule over 8 equal groups of key latents, values exact at fp16.
#include <gtest/gtest.h>

#include "codecs/pca_codec.hpp"
#include "store/store_util.hpp"

#include "test_util.hpp"
#include "transform/family_coders.hpp"
#include "transform/transform_cache.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/codec.hpp"

namespace {

constexpr int64_t kD = 16;

TEST(SvdqTransform, ScheduleRule) {
  const std::vector<int> sched = {8, 4, 2, 1, 1, 0, 0, 0};
  EXPECT_EQ(vq::transform::svdq_schedule_bits(16, 16, sched),
            (std::vector<int>{8, 8, 4, 4, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0}));
  // A rank-deficient fit (r = 5 < D = 16) keeps the slots of the first components.
  EXPECT_EQ(vq::transform::svdq_schedule_bits(5, 16, sched), (std::vector<int>{8, 8, 4, 4, 2}));
}

TEST(SvdqTransform, CacheAppliesScheduleToKeysAndKeepsValuesAtFp16) {
  auto cache = vq::make_cache(vq::CacheConfig::parse("svdq"), kD);
  const auto K = vqtest::random_tensor(1, 2, 256, kD, 21);
  const auto V = vqtest::random_tensor(1, 2, 256, kD, 22);
  cache->update(K, V);
  for (int64_t h = 0; h < 2; ++h) {
    const auto& kc = storetest::codec<vq::codecs::PcaCodec>(*cache, 0, h, 0);
    // The 10 surviving widths of the schedule, packed: 32 bits = 4 bytes per key row.
    EXPECT_EQ(std::vector<int>(kc.widths().begin(), kc.widths().end()),
              (std::vector<int>{8, 8, 4, 4, 2, 2, 1, 1, 1, 1}));
    EXPECT_EQ(kc.row_bytes(), 4);
    const auto& vc = storetest::codec<vq::store::Fp16Codec>(*cache, 0, h, 1);
    EXPECT_EQ(vc.row_bytes(), 2 * kD) << "values must be stored at fp16";
  }
  const auto r = cache->fetch();
  double kerr = 0, kenergy = 0;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t s = 0; s < 256; ++s)
      for (int64_t d = 0; d < kD; ++d) {
        EXPECT_EQ(r.values.at(0, h, s, d), vq::round_to_fp16(V.at(0, h, s, d)));
        const double e = r.keys.at(0, h, s, d) - K.at(0, h, s, d);
        kerr += e * e;
        kenergy += static_cast<double>(K.at(0, h, s, d)) * K.at(0, h, s, d);
      }
  // Keys are lossy (6 of 16 components dropped, 4 at 1 bit) yet better than the mean alone.
  // (On Gaussian latents a 1-bit min/max quantizer costs more than dropping the component, so
  // the schedule's 1-bit groups are what make this error large; see docs/methods.md.)
  EXPECT_GT(kerr / kenergy, 1e-4);
  EXPECT_LT(kerr / kenergy, 1.0);
  const auto st = cache->stats();
  EXPECT_GT(st.full_seq_bytes / (st.content_bytes + st.codec_param_bytes), 1.0);
}

TEST(SvdqTransform, CodecKindAndScheduleOption) {
  const auto V = vqtest::random_tensor(1, 2, 40, kD, 23);
  auto vc = vq::make_codec("svdq:kind=v", kD);
  const auto y = vc->decode(vc->encode(V));
  for (int64_t i = 0; i < V.numel(); ++i) EXPECT_EQ(y.data()[i], vq::round_to_fp16(V.data()[i]));
  // schedule=8,0: the top half of the components at 8 bits, the rest dropped.
  auto kc = vq::make_codec("svdq:schedule=8,0", kD);
  const auto blk = kc->encode(V);
  EXPECT_EQ(blk.sections[0].bytes[2], kD / 2);
  for (int64_t j = 0; j < kD / 2; ++j) EXPECT_EQ(blk.sections[0].bytes[3 + j], 8);
  EXPECT_THROW(vq::make_codec("svdq:schedule=9", kD), vq::InvalidArgument);
  // one group per component is the most a head can take; one more would skip a group
  std::string sched = "schedule=8";
  for (int64_t g = 1; g < kD; ++g) sched += ",4";
  EXPECT_NO_THROW(vq::make_codec("svdq:" + sched, kD));
  try {
    vq::make_codec("svdq:" + sched + ",2", kD);
    ADD_FAILURE() << "17 groups accepted at head_dim 16";
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("schedule has 17 groups, more than head_dim 16"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(vq::make_cache("svdq:" + sched + ",2", kD), vq::InvalidArgument);
}

}  // namespace

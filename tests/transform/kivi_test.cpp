// kivi: the recent `residual` tokens exact at fp16; 2-bit per-channel keys / per-token values
// within their quantization step; the codec agrees with the cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "test_util.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/codec.hpp"

namespace {

constexpr int64_t kD = 64;

/// Largest |decoded - input| must stay within half a step (range / (2 (2^bits - 1))) of the
/// group the value was quantized with (plus fp16 rounding of the input).
void expect_within_step(const vq::Tensor& x, const vq::Tensor& y, int64_t n_quant, bool keys) {
  for (int64_t s0 = 0; s0 < n_quant; s0 += 32)
    for (int64_t a = 0; a < (keys ? kD : 32); ++a)
      for (int64_t g = 0; g < (keys ? 1 : kD / 32); ++g) {
        // keys: channel a over tokens s0..s0+31; values: token s0+a, channels g*32..g*32+31
        float lo = INFINITY, hi = -INFINITY;
        auto at = [&](const vq::Tensor& t, int64_t i) {
          return keys ? t.at(0, 0, s0 + i, a) : t.at(0, 0, s0 + a, g * 32 + i);
        };
        for (int64_t i = 0; i < 32; ++i) {
          lo = std::min(lo, vq::round_to_fp16(at(x, i)));
          hi = std::max(hi, vq::round_to_fp16(at(x, i)));
        }
        const double half_step = (hi - lo) / 6.0;
        for (int64_t i = 0; i < 32; ++i)
          ASSERT_LE(std::fabs(at(y, i) - at(x, i)),
                    half_step * 1.001 + 1e-3 * std::fabs(at(x, i)) + 1e-6);
      }
}

TEST(KiviTransform, RecentWindowExactAndErrorBounded) {
  auto cache = vq::make_cache(vq::CacheConfig::parse("kivi"), kD);
  const auto K = vqtest::random_tensor(1, 1, 300, kD, 51, 3.0);
  const auto V = vqtest::random_tensor(1, 1, 300, kD, 52, 3.0);
  cache->update(K.slice_tokens(0, 150), V.slice_tokens(0, 150));
  for (int64_t s = 150; s < 300; ++s) {
    cache->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
    const auto r = cache->fetch();
    // The last 128 tokens are always exact at fp16.
    for (int64_t t = std::max<int64_t>(0, s + 1 - 128); t <= s; ++t)
      for (int64_t d = 0; d < kD; ++d) {
        ASSERT_EQ(r.keys.at(0, 0, t, d), vq::round_to_fp16(K.at(0, 0, t, d))) << "step " << s;
        ASSERT_EQ(r.values.at(0, 0, t, d), vq::round_to_fp16(V.at(0, 0, t, d))) << "step " << s;
      }
  }
  const auto st = cache->stats();
  // 300 tokens: (300 - 128) / 32 = 5 groups quantized, 140 tokens at fp16.
  EXPECT_EQ(st.get("encoded_tokens"), 160);
  EXPECT_EQ(st.get("raw_tokens"), 140);
  // Chunk params: 5 key chunks x 64 channels x (min, scale) f32; the values' per-token ranges
  // sit inside their rows.
  EXPECT_EQ(st.codec_param_bytes, 8.0 * 5 * kD);
  const auto r = cache->fetch();
  // The quantized tokens really are 2-bit (not exact) and within half a quantization step.
  bool lossy = false;
  for (int64_t d = 0; d < kD; ++d)
    lossy = lossy || r.keys.at(0, 0, 0, d) != vq::round_to_fp16(K.at(0, 0, 0, d));
  EXPECT_TRUE(lossy);
  expect_within_step(K, r.keys, 160, true);
  expect_within_step(V, r.values, 160, false);
  // The codec of the same block gives the cache's view.
  auto kc = vq::make_codec("kivi:kind=k", kD);
  auto vc = vq::make_codec("kivi:kind=v", kD);
  const auto ky = kc->decode(kc->encode(K));
  const auto vy = vc->decode(vc->encode(V));
  for (int64_t i = 0; i < K.numel(); ++i) {
    ASSERT_EQ(ky.data()[i], r.keys.data()[i]);
    ASSERT_EQ(vy.data()[i], r.values.data()[i]);
  }
}

TEST(KiviTransform, ResidualZeroQuantizesEveryFullGroup) {
  auto cache = vq::make_cache(vq::CacheConfig::parse("kivi:residual=0"), kD);
  cache->update(vqtest::random_tensor(1, 2, 70, kD, 53), vqtest::random_tensor(1, 2, 70, kD, 54));
  EXPECT_EQ(cache->stats().get("encoded_tokens"), 64);
  EXPECT_EQ(cache->stats().get("raw_tokens"), 6);
  // The resident K/V codes and their parameters are over 3x smaller than fp16 (kept_bytes adds
  // slot bookkeeping on top).
  const auto st = cache->stats();
  EXPECT_GT(st.full_seq_bytes / (st.content_bytes + st.codec_param_bytes), 3.0);
}

}  // namespace

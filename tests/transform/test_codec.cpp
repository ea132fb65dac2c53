// Every transform method's BlockCodec (the registry is the loop): round trip within the method's
// error, determinism, byte breakdowns that add up, the section layout, S = 0 and S = 1 blocks,
// agreement with the cache's stored bytes, and rejection of truncated, extended, bit-flipped or
// mislabelled input with vq::FormatError.
#include <gtest/gtest.h>

#include "codecs/pca_codec.hpp"
#include "store/store_util.hpp"

#include <cmath>

#include "coding/ggml_blocks.hpp"
#include "core/rng.hpp"
#include "test_util.hpp"
#include "transform/transform_cache.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/codec.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"

namespace {

constexpr int64_t kD = 16;

std::vector<std::string> transform_ids() {
  std::vector<std::string> ids;
  for (const auto& m : vq::methods())
    if (m.family == vq::Family::Transform && m.make_codec)
      ids.push_back(m.id);  // with a storage form
  return ids;
}

/// The spec each method is tested with: a generous budget so the round trip is tight.
std::string generous(const std::string& id) {
  const vq::MethodInfo& m = vq::find_method(id);
  std::string spec = id;
  if (vq::find_option(m, "bit_budget"))
    spec += ":bit_budget=" + std::to_string(8 * kD) + ",chunk_tokens=24";
  // Fixed-rate methods (svdq, palu, spectralquant, gear, kivi): every width at 8 bits.
  std::string extra;
  for (const char* o : {"schedule", "hi_bits", "lo_bits", "signal_bits", "noise_bits", "bits"})
    if (vq::find_option(m, o)) extra += std::string(extra.empty() ? "" : ",") + o + "=8";
  // q8_0 / q4_0 blocks lie inside a head: kD = 16 takes the block=16 variant.
  if (vq::find_option(m, "block")) extra += std::string(extra.empty() ? "" : ",") + "block=16";
  if (!extra.empty()) spec += (spec.find(':') == std::string::npos ? ":" : ",") + extra;
  return spec;
}

vq::Tensor fp16_tensor(int64_t H, int64_t S, uint64_t seed) {
  vq::Tensor t = vqtest::random_tensor(1, H, S, kD, seed, 2.0);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = vq::round_to_fp16(t.data()[i]);
  return t;
}

class TransformCodec : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<vq::BlockCodec> codec() const { return vq::make_codec(generous(GetParam()), kD); }
};

TEST_P(TransformCodec, RoundTripDeterminismAndBreakdown) {
  auto c = codec();
  EXPECT_EQ(c->method(), GetParam());
  EXPECT_EQ(c->heads_coupled(), vq::find_method(GetParam()).heads_coupled);
  const vq::Tensor x = fp16_tensor(3, 70, 1);
  const vq::EncodedBlock blk = c->encode(x);
  EXPECT_EQ(blk.H, 3);
  EXPECT_EQ(blk.S, 70);
  EXPECT_EQ(blk.D, kD);
  ASSERT_EQ(blk.sections.size(), c->heads_coupled() ? 1u : 3u);
  for (size_t i = 0; i < blk.sections.size(); ++i) {
    const auto& s = blk.sections[i];
    EXPECT_EQ(s.head, c->heads_coupled() ? -1 : static_cast<int64_t>(i));
    EXPECT_EQ(s.breakdown.total(), static_cast<int64_t>(s.bytes.size()));
    EXPECT_EQ(s.breakdown.raw, 0);
    EXPECT_GE(s.pre_entropy_bytes(), 0);
  }
  const vq::Tensor y = c->decode(blk);
  ASSERT_EQ(y.shape(), x.shape());
  double err = 0, energy = 0, worst = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double d = static_cast<double>(x.data()[i]) - y.data()[i];
    err += d * d;
    energy += static_cast<double>(x.data()[i]) * x.data()[i];
    worst = std::max(worst, std::fabs(d));
  }
  // q4_0 has 4.5 bits per value; svdq_split caps lo at 4 bits (hi = 2 lo <= 8); the others get
  // 8 bits per component or value here.
  const double bound = GetParam() == "q4_0" || GetParam() == "svdq_split" ? 2e-2 : 1e-4;
  EXPECT_LT(err / energy, bound);
  // Deterministic: the same input gives the same bytes.
  const vq::EncodedBlock again = c->encode(x);
  for (size_t i = 0; i < blk.sections.size(); ++i)
    EXPECT_EQ(again.sections[i].bytes, blk.sections[i].bytes);
}

TEST_P(TransformCodec, EmptyAndOneTokenBlocks) {
  auto c = codec();
  const vq::EncodedBlock e = c->encode(vq::Tensor(1, 2, 0, kD));
  for (const auto& s : e.sections) EXPECT_TRUE(s.bytes.empty());
  EXPECT_EQ(c->decode(e).S(), 0);
  const vq::Tensor x = fp16_tensor(2, 1, 2);
  const vq::Tensor y = c->decode(c->encode(x));
  for (int64_t i = 0; i < x.numel(); ++i)
    EXPECT_NEAR(y.data()[i], x.data()[i], GetParam() == "q4_0" ? 0.6 : 0.05);
}

TEST_P(TransformCodec, RejectsMalformedBlocks) {
  auto c = codec();
  const vq::Tensor x = fp16_tensor(2, 40, 3);
  const vq::EncodedBlock good = c->encode(x);
  auto expect_reject = [&](const vq::EncodedBlock& b, const std::string& what) {
    std::vector<float> out(
        static_cast<size_t>(std::max<int64_t>(b.H, 1) * std::max<int64_t>(b.S, 0) * kD + 1));
    EXPECT_THROW(c->decode(b, out.data()), vq::FormatError) << what;
  };
  {  // every truncation of the first section
    const auto& bytes = good.sections[0].bytes;
    for (size_t cut = 0; cut < bytes.size(); cut += 1 + bytes.size() / 97) {
      vq::EncodedBlock b = good;
      b.sections[0].bytes.resize(cut);
      expect_reject(b, "truncated at " + std::to_string(cut));
    }
  }
  {
    vq::EncodedBlock b = good;
    b.sections.back().bytes.push_back(0);
    expect_reject(b, "trailing byte");
  }
  {
    vq::EncodedBlock b = good;
    b.S += 1;
    expect_reject(b, "S larger than stored");
  }
  {
    vq::EncodedBlock b = good;
    b.S -= 1;
    expect_reject(b, "S smaller than stored");
  }
  {
    vq::EncodedBlock b = good;
    b.D += 1;
    expect_reject(b, "wrong D");
  }
  {
    vq::EncodedBlock b = good;
    b.sections[0].head = c->heads_coupled() ? 0 : 1;
    expect_reject(b, "mislabelled head");
  }
  {
    vq::EncodedBlock b = good;
    b.sections.push_back(b.sections[0]);
    expect_reject(b, "extra section");
  }
  // Random bit flips: either a FormatError or a finite decode; never anything else.
  vq::Rng rng(99);
  std::vector<float> out(static_cast<size_t>(2 * 40 * kD));
  int rejected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    vq::EncodedBlock b = good;
    auto& bytes = b.sections[rng.below(b.sections.size())].bytes;
    for (int f = 0; f < 1 + static_cast<int>(rng.below(3)); ++f)
      bytes[rng.below(bytes.size())] ^= static_cast<uint8_t>(1u << rng.below(8));
    try {
      c->decode(b, out.data());
      for (float v : out) ASSERT_TRUE(std::isfinite(v));
    } catch (const vq::FormatError&) {
      ++rejected;
    }
  }
  // Every ggml byte pattern with a finite scale is a valid block, so only PCA sections must
  // reject some flips.
  if (vq::find_option(vq::find_method(GetParam()), "block") == nullptr) {
    EXPECT_GT(rejected, 0);
  }
}

TEST_P(TransformCodec, CacheHoldsWhatTheCodecDecodes) {
  auto c = codec();
  // gear's resident form keeps per-row outliers (src/codecs/gear_codec.hpp): its two forms decode
  // differently by design. (q8_0/q4_0 lay blocks inside each head in both forms since .vqkv
  // version 2, so they are checked here too.)
  if (c->heads_coupled() || GetParam() == "gear")
    GTEST_SKIP() << GetParam() << ": resident and storage forms differ by design";
  // Whole sequence in one call: the cache fits on it and encodes it with the same chunking.
  auto cache = vq::make_cache(generous(GetParam()), kD);
  const vq::Tensor K = fp16_tensor(2, 60, 5), V = fp16_tensor(2, 60, 6);
  cache->update(K, V);
  // Coders without a fit keep a partial chunk raw, and then the chunking differs from the codec's.
  if (cache->stats().get("raw_tokens") != 0)
    GTEST_SKIP() << GetParam() << " holds a raw window after one call";
  const vq::EncodedBlock blk = c->encode(K);
  const vq::Tensor y = c->decode(blk);
  const vq::FetchResult got = cache->fetch();
  // The resident decode sums each row's components one by one; the storage decoder runs one GEMM
  // per chunk, whose kernels may split a sum differently: the codes agree, the last bits may not.
  for (int64_t i = 0; i < K.numel(); ++i)
    ASSERT_NEAR(got.keys.data()[i], y.data()[i], 1e-5 * (1.0 + std::fabs(y.data()[i]))) << i;
  // For the PCA methods the cache's storage-form size is the codec's, K and V.
  const auto* pca =
      dynamic_cast<const vq::codecs::PcaCodec*>(&storetest::head_store(*cache).codec(1));
  if (pca != nullptr && !c->heads_coupled()) {
    const vq::EncodedBlock bv = c->encode(V);
    EXPECT_DOUBLE_EQ(cache->stats().stored_bytes,
                     static_cast<double>(blk.total_bytes() + bv.total_bytes()));
  }
}

INSTANTIATE_TEST_SUITE_P(AllTransformMethods, TransformCodec, ::testing::ValuesIn(transform_ids()),
                         [](const auto& info) { return info.param; });

TEST(TransformCodecGgml, BlocksInsideEachHeadAndTheirByteCount) {
  // 3 heads of D = 32: one block per head and token, each head its own section; head_dim 16
  // takes the block=16 variant and is refused at llama.cpp's block of 32.
  const int64_t D = 32;
  for (const char* id : {"q8_0", "q4_0"}) {
    auto c = vq::make_codec(id, D);
    const vq::Tensor x = vqtest::random_tensor(1, 3, 10, D, 7, 2.0);
    const vq::EncodedBlock blk = c->encode(x);
    const auto t =
        std::string(id) == "q8_0" ? vq::coding::GgmlType::Q8_0 : vq::coding::GgmlType::Q4_0;
    ASSERT_EQ(blk.sections.size(), 3u);
    EXPECT_EQ(blk.total_bytes(), 3 * 10 * vq::coding::ggml_block_bytes(t));
    EXPECT_EQ(blk.breakdown().params, 3 * 10 * 2);
    // Head 1's first token is one ggml block of its own 32 values.
    std::vector<uint8_t> ref(static_cast<size_t>(vq::coding::ggml_row_bytes(t, D)));
    vq::coding::ggml_quantize_row(t, x.row(0, 1, 0), D, ref.data());
    EXPECT_TRUE(std::equal(ref.begin(), ref.end(), blk.sections[1].bytes.begin()));
    EXPECT_THROW(vq::make_codec(id, 16), vq::InvalidArgument);
    EXPECT_NO_THROW(vq::make_codec(std::string(id) + ":block=16", 16));
  }
}

TEST(TransformCodecGgml, CacheBytesPerTokenMatchLlamaCpp) {
  auto cache = vq::make_cache("q8_0", 32);
  const vq::Tensor K = vqtest::random_tensor(1, 4, 50, 32, 1),
                   V = vqtest::random_tensor(1, 4, 50, 32, 2);
  cache->update(K.slice_tokens(0, 10), V.slice_tokens(0, 10));
  for (int64_t s = 10; s < 50; ++s) cache->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
  const vq::CacheStats st = cache->stats();
  // One block of 34 bytes per head and token (llama.cpp's blocks lie inside a head), K and V.
  EXPECT_EQ(storetest::head_store(*cache).codec(0).row_bytes(), 34);
  EXPECT_DOUBLE_EQ(st.stored_bytes, 50.0 * 2 * 4 * 34);
  EXPECT_GE(st.content_bytes, 50.0 * 2 * 4 * 34);
  EXPECT_LE(st.content_bytes, 1.6 * 50.0 * 2 * 4 * 34);  // capacity grows geometrically
  EXPECT_EQ(st.get("raw_tokens"), 0.0);
}

TEST(TransformCodecGgml, MakeCodecRejectsEvictionMethods) {
  EXPECT_THROW(vq::make_codec("h2o:budget=8", kD), vq::InvalidArgument);
}

}  // namespace

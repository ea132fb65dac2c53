// Limits of the .vqkv writer and reader (issue 16): compress refuses values its codec cannot
// store (so every file it writes decodes), and the reader checks every declared size against the
// bytes present before it allocates (decompression bombs).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "io/vqkv.hpp"
#include "test_util.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/vqkv.hpp"

namespace {

std::vector<float> randn(size_t n, uint64_t seed) {
  vq::Rng rng(seed);
  std::vector<float> x(n);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  return x;
}

// Every transform method, and svdq on values (its fp16 kind).
std::vector<std::string> transform_specs() {
  std::vector<std::string> specs;
  for (const auto& m : vq::methods())
    if (m.family == vq::Family::Transform && m.make_codec)
      specs.push_back(m.id);  // with a storage form
  specs.push_back("svdq:kind=v");
  return specs;
}

template <typename E, typename Fn>
std::string message_of(Fn fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("WRONG EXCEPTION TYPE: ") + e.what();
  }
  return "NO EXCEPTION";
}

// Shape [2, 64, 16] ([H, S, D]); the planted value sits at [1, 5, 3].
const std::vector<int64_t> kShape = {2, 64, 16};
constexpr size_t kAt = (1 * 64 + 5) * 16 + 3;

TEST(VqkvLimits, ValuesInsideTheCodecRangeRoundTripFinite) {
  for (const std::string& spec : transform_specs()) {
    const vq::CacheConfig c = vqtest::spec_at_dim(spec, kShape.back());
    const double lim = vq::vqkv::codec_value_range(c).max_abs;
    ASSERT_GT(lim, 0.0) << spec;
    for (const double sign : {1.0, -1.0}) {
      std::vector<float> x = randn(2 * 64 * 16, 7);
      // The largest magnitude accepted, and a neighbour half as large in the same block.
      x[kAt] = static_cast<float>(sign * lim);
      x[kAt + 1] = static_cast<float>(sign * lim * 0.5);
      std::vector<uint8_t> file;
      ASSERT_NO_THROW(file = vq::vqkv_compress(x.data(), kShape, c)) << spec << " at " << lim;
      vq::VqkvArray back;
      ASSERT_NO_THROW(back = vq::vqkv_decompress(file.data(), file.size()))
          << spec << ": compress accepted " << sign * lim << " but decompress refused the file";
      for (float v : back.values) ASSERT_TRUE(std::isfinite(v)) << spec;
    }
  }
}

TEST(VqkvLimits, ValuesOutsideTheCodecRangeAreRefusedAtCompressNamingValuePositionAndRange) {
  for (const std::string& spec : transform_specs()) {
    const vq::CacheConfig c = vqtest::spec_at_dim(spec, kShape.back());
    const double lim = vq::vqkv::codec_value_range(c).max_abs;
    // The cases (7e4 for the fp16 codecs, 1e38 for every codec) and just past the limit.
    for (const double v : {7e4, 1e38, lim * 1.01}) {
      if (v <= lim) continue;
      std::vector<float> x = randn(2 * 64 * 16, 8);
      x[kAt] = static_cast<float>(v);
      const std::string msg =
          message_of<vq::InvalidArgument>([&] { (void)vq::vqkv_compress(x.data(), kShape, c); });
      EXPECT_NE(msg.find("at [1, 5, 3]"), std::string::npos) << spec << " " << v << ": " << msg;
      EXPECT_NE(msg.find("outside the range of " + c.method()), std::string::npos) << msg;
      EXPECT_EQ(msg.find("WRONG"), std::string::npos) << msg;
      EXPECT_NE(msg, "NO EXCEPTION") << spec << " accepted " << v;
    }
  }
  // The range named is the codec's: kivi's is fp16's.
  std::vector<float> x = randn(2 * 64 * 16, 9);
  x[kAt] = 7e4f;
  const std::string msg = message_of<vq::InvalidArgument>(
      [&] { (void)vq::vqkv_compress(x.data(), kShape, vq::CacheConfig::parse("kivi")); });
  EXPECT_NE(msg.find("value 70000 at [1, 5, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[-65504, 65504]"), std::string::npos) << msg;
}

// Rewrite a header field and recompute the header checksum (a forged but self-consistent file).
void forge(std::vector<uint8_t>& f, size_t off, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) f[off + static_cast<size_t>(i)] = uint8_t(value >> (8 * i));
  uint32_t spec_len;
  std::memcpy(&spec_len, f.data() + vq::vqkv::kOffSpecLen, 4);
  uint64_t n;
  std::memcpy(&n, f.data() + vq::vqkv::kOffNSections, 8);
  const uint64_t end = vq::vqkv::checksum_offset(spec_len, n);
  ASSERT_LE(end + 8, f.size());
  const uint64_t sum = vq::vqkv::xxh64(f.data(), static_cast<size_t>(end));
  std::memcpy(f.data() + end, &sum, 8);
}

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(VqkvLimits, DeclaredShapesAreCheckedAgainstTheBytesPresentBeforeAllocating) {
  // The bomb: a small q8_0 file whose (checksummed) header claims S = 2^24 rows.
  for (const std::string spec : {"q8_0", "q4_0", "kivi", "svdq:kind=v", "kvtc:bit_budget=16",
                                 "gear", "uniform:bit_budget=16"}) {
    const std::vector<float> x = randn(2 * 8 * 64, 3);
    std::vector<uint8_t> file =
        vq::vqkv_compress(x.data(), {2, 8, 64}, vqtest::spec_at_dim(spec, 64));
    forge(file, vq::vqkv::kOffS, uint64_t{1} << 24, 8);
    std::string msg;
    const double s = seconds_of([&] {
      msg =
          message_of<vq::FormatError>([&] { (void)vq::vqkv_decompress(file.data(), file.size()); });
    });
    EXPECT_NE(msg.find("need at least"), std::string::npos) << spec << ": " << msg;
    EXPECT_NE(msg.find("S = 16777216"), std::string::npos) << spec << ": " << msg;
    EXPECT_LT(s, 1.0) << spec << ": refusing the bomb took " << s << " s";
  }
}

TEST(VqkvLimits, ShapesFarBeyondTheFileSizeAreRefusedBeforeAllocating) {
  // kvtc over one long chunk needs one byte per chunk only, so a claim of 2^20 tokens passes the
  // per-section minimum; the bound on declared values per file byte refuses it instead. (Tight
  // bounds here so that the claim stays small enough to test; the defaults are 2^26 values free,
  // then 2^16 values per byte.)
  const std::vector<float> x = randn(2 * 16 * 64, 4);
  const std::vector<uint8_t> good = vq::vqkv_compress(
      x.data(), {2, 16, 64}, vq::CacheConfig::parse("kvtc:bit_budget=8,chunk_tokens=1048576"));
  vq::VqkvReadOptions strict;
  strict.free_values = 1024;
  strict.max_values_per_byte = 64;
  // The honest file (2048 values in a few kB) decodes under the same bounds.
  EXPECT_EQ(message_of<vq::FormatError>(
                [&] { (void)vq::vqkv_decompress(good.data(), good.size(), strict); }),
            "NO EXCEPTION");
  std::vector<uint8_t> file = good;
  forge(file, vq::vqkv::kOffS, uint64_t{1} << 20, 8);
  std::string msg;
  const double s = seconds_of([&] {
    msg = message_of<vq::FormatError>(
        [&] { (void)vq::vqkv_decompress(file.data(), file.size(), strict); });
  });
  EXPECT_NE(msg.find("decompression-bomb"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 1048576, 64] declares 134217728 values in a file of " +
                     std::to_string(file.size()) + " bytes"),
            std::string::npos)
      << msg;
  EXPECT_LT(s, 1.0);
  // The default bound: 2^27 values is above the free 2^26, so a file holding fewer than
  // 2^27 / 2^16 = 2048 bytes is refused; a larger one would be read (and fail on its chunks).
  if (file.size() < 2048) {
    EXPECT_NE(message_of<vq::FormatError>([&] {
                (void)vq::vqkv_decompress(file.data(), file.size());
              }).find("decompression-bomb"),
              std::string::npos);
  }
}

}  // namespace

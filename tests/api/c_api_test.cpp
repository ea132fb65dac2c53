// The C API: the same results as the C++ API, status codes and messages for every misuse, and no
// exception crossing the boundary.
#include "veloxquant/c_api.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/vqkv.hpp"

namespace {

TEST(CApi, CacheMatchesCppApi) {
  const int64_t B = 1, H = 2, S = 40, D = 8;
  const vq::Tensor k = vqtest::random_tensor(B, H, S, D, 1);
  const vq::Tensor v = vqtest::random_tensor(B, H, S, D, 2);
  vq_cache* c = nullptr;
  ASSERT_EQ(vq_cache_create("h2o:budget=10,n_sink=2", D, &c), VQ_OK) << vq_last_error();
  ASSERT_EQ(vq_cache_update(c, k.data(), v.data(), nullptr, B, H, S, 0), VQ_OK);
  int64_t n = 0, b = 0, h = 0, d = 0, off = 0;
  ASSERT_EQ(vq_cache_kept_tokens(c, &n), VQ_OK);
  ASSERT_EQ(vq_cache_shape(c, &b, &h, &d, &off), VQ_OK);
  EXPECT_EQ(n, 10);
  EXPECT_EQ(b * 100 + h * 10 + d, 128);
  EXPECT_EQ(off, S);
  std::vector<float> kk(static_cast<size_t>(B * H * n * D)), vv(kk.size());
  std::vector<int64_t> pos(static_cast<size_t>(B * H * n));
  ASSERT_EQ(vq_cache_fetch(c, kk.data(), vv.data(), pos.data(), n, &n), VQ_OK);

  auto ref = vq::make_cache("h2o:budget=10,n_sink=2", D);
  const vq::FetchResult r = ref->update_and_fetch(k, v);
  EXPECT_EQ(pos, r.positions);
  EXPECT_EQ(0, std::memcmp(kk.data(), r.keys.data(), kk.size() * 4));
  EXPECT_EQ(0, std::memcmp(vv.data(), r.values.data(), vv.size() * 4));

  vq_cache_stats st;
  ASSERT_EQ(vq_cache_get_stats(c, &st), VQ_OK);
  EXPECT_EQ(st.tokens_seen, S);
  EXPECT_DOUBLE_EQ(st.kept_bytes, ref->stats().kept_bytes);
  EXPECT_DOUBLE_EQ(st.compression_ratio, ref->stats().compression_ratio);
  vq_cache_destroy(c);
}

TEST(CApi, Float16InputsAndTransformStats) {
  const int64_t H = 2, S = 64, D = 16;
  const vq::Tensor k = vqtest::random_tensor(1, H, S, D, 3);
  const std::vector<uint16_t> k16 = k.to_fp16();
  vq_cache* c = nullptr;
  ASSERT_EQ(vq_cache_create_layer("kvtc:bit_budget=32", D, 1, 4, 7, &c), VQ_OK);
  ASSERT_EQ(vq_cache_update_typed(c, VQ_F16, k16.data(), k16.data(), nullptr, 1, H, S, 0), VQ_OK)
      << vq_last_error();
  vq_cache_stats st;
  ASSERT_EQ(vq_cache_get_stats(c, &st), VQ_OK);
  ASSERT_GT(st.n_extra, 0);
  bool found = false;
  for (int64_t i = 0; i < st.n_extra; ++i) {
    const char* name = nullptr;
    double value = 0;
    ASSERT_EQ(vq_cache_stats_extra(c, i, &name, &value), VQ_OK);
    if (std::string(name) == "content_bytes") {
      found = true;
      EXPECT_LE(value, st.kept_bytes);
      EXPECT_GT(value, 0);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(vq_cache_stats_extra(c, st.n_extra, nullptr, nullptr), VQ_ERR_INVALID_ARGUMENT);
  vq_cache_destroy(c);
}

TEST(CApi, CompressIsTheVqkvFormat) {
  const vq::Tensor x = vqtest::random_tensor(1, 3, 50, 16, 4);
  const int64_t shape[3] = {3, 50, 16};
  uint8_t* blob = nullptr;
  size_t size = 0;
  ASSERT_EQ(vq_compress(x.data(), shape, 3, "kvtc:bit_budget=40", &blob, &size), VQ_OK);
  const std::vector<uint8_t> cpp =
      vq::vqkv_compress(x.data(), {3, 50, 16}, vq::CacheConfig::parse("kvtc:bit_budget=40"));
  ASSERT_EQ(size, cpp.size());
  EXPECT_EQ(0, std::memcmp(blob, cpp.data(), size));
  float* back = nullptr;
  int64_t bshape[5];
  int ndim = 0;
  ASSERT_EQ(vq_decompress(blob, size, &back, bshape, &ndim), VQ_OK);
  EXPECT_EQ(ndim, 3);
  EXPECT_EQ(bshape[1], 50);
  const vq::VqkvArray ref = vq::vqkv_decompress(cpp.data(), cpp.size());
  EXPECT_EQ(0, std::memcmp(back, ref.values.data(), ref.values.size() * 4));
  vq_free(back);
  // Every truncation is a format error with a message, and no output is left behind.
  for (size_t cut = 0; cut < size; cut += 13) {
    back = reinterpret_cast<float*>(0x1);
    EXPECT_EQ(vq_decompress(blob, cut, &back, bshape, &ndim), VQ_ERR_FORMAT) << cut;
    EXPECT_EQ(back, nullptr);
    EXPECT_GT(std::strlen(vq_last_error()), 0u);
  }
  vq_free(blob);
}

TEST(CApi, MisuseGivesCodesAndMessages) {
  vq_cache* c = reinterpret_cast<vq_cache*>(0x1);
  EXPECT_EQ(vq_cache_create("curdkv:budget=0", 8, &c), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(vq_last_error()).find("budget"), std::string::npos);
  EXPECT_EQ(vq_cache_create(nullptr, 8, &c), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(vq_cache_create("full", 0, &c), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(vq_cache_create("full", 8, nullptr), VQ_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(vq_cache_create("full", 8, &c), VQ_OK);
  EXPECT_STREQ(vq_last_error(), "");
  std::vector<float> x(2 * 4 * 8, 1.0f);
  EXPECT_EQ(vq_cache_update(c, x.data(), nullptr, nullptr, 1, 2, 4, 0), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(vq_cache_update(c, x.data(), x.data(), nullptr, 1, 2, 4, 3), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(vq_cache_update(c, x.data(), x.data(), nullptr, 1, -2, 4, 0), VQ_ERR_INVALID_ARGUMENT);
  x[5] = NAN;
  EXPECT_EQ(vq_cache_update(c, x.data(), x.data(), nullptr, 1, 2, 4, 0), VQ_ERR_INVALID_ARGUMENT);
  x[5] = 0;
  EXPECT_EQ(vq_cache_update_typed(c, 9, x.data(), x.data(), nullptr, 1, 2, 4, 0),
            VQ_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(vq_cache_update(c, x.data(), x.data(), nullptr, 1, 2, 4, 0), VQ_OK);
  std::vector<float> small(8);
  EXPECT_EQ(vq_cache_fetch(c, small.data(), nullptr, nullptr, 1, nullptr), VQ_ERR_INVALID_ARGUMENT);
  vq_cache_destroy(c);
  vq_cache_destroy(nullptr);

  uint8_t* blob = nullptr;
  size_t size = 0;
  const int64_t shape[2] = {4, 8};
  EXPECT_EQ(vq_compress(x.data(), shape, 2, "h2o", &blob, &size), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(vq_compress(x.data(), shape, 1, "q8_0", &blob, &size), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(blob, nullptr);
  EXPECT_STREQ(vq_status_name(VQ_ERR_FORMAT), "format error");
  int64_t count = 0;
  ASSERT_EQ(vq_method_count(&count), VQ_OK);
  const char* id = nullptr;
  ASSERT_EQ(vq_method_id(0, &id), VQ_OK);
  EXPECT_STREQ(id, "full");
  EXPECT_EQ(vq_method_id(count, &id), VQ_ERR_INVALID_ARGUMENT);
}

TEST(CApi, LastErrorIsPerThread) {
  vq_cache* c = nullptr;
  ASSERT_EQ(vq_cache_create("nope", 8, &c), VQ_ERR_INVALID_ARGUMENT);
  std::string other;
  std::thread t([&] {
    vq_cache* c2 = nullptr;
    other = vq_cache_create("full", 8, &c2) == VQ_OK ? vq_last_error() : "failed";
    vq_cache_destroy(c2);
  });
  t.join();
  EXPECT_EQ(other, "");
  EXPECT_NE(std::string(vq_last_error()).find("nope"), std::string::npos);
}

}  // namespace

namespace {

// Issue 16: vq_compress refuses a value its codec cannot store (so every blob it returns
// decodes), with the value, its position and the range in vq_last_error().
TEST(CApi, CompressRefusesValuesOutsideTheCodecRange) {
  const int64_t shape[3] = {2, 64, 16};
  std::vector<float> x(2 * 64 * 16, 0.25f);
  x[(1 * 64 + 5) * 16 + 3] = 7e4f;
  uint8_t* blob = nullptr;
  size_t size = 0;
  EXPECT_EQ(vq_compress(x.data(), shape, 3, "kivi", &blob, &size), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(blob, nullptr);
  const std::string msg = vq_last_error();
  EXPECT_NE(msg.find("value 70000 at [1, 5, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[-65504, 65504]"), std::string::npos) << msg;
  x[(1 * 64 + 5) * 16 + 3] = 1e38f;
  EXPECT_EQ(vq_compress(x.data(), shape, 3, "q8_0:block=16", &blob, &size),
            VQ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vq_last_error()).find("outside the range of q8_0"), std::string::npos)
      << vq_last_error();
  // Inside the range: compressed and decoded, finite.
  x[(1 * 64 + 5) * 16 + 3] = 6e4f;
  ASSERT_EQ(vq_compress(x.data(), shape, 3, "kivi", &blob, &size), VQ_OK) << vq_last_error();
  float* values = nullptr;
  int64_t out_shape[5];
  int ndim = 0;
  ASSERT_EQ(vq_decompress(blob, size, &values, out_shape, &ndim), VQ_OK) << vq_last_error();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(std::isfinite(values[i]));
  vq_free(values);
  vq_free(blob);
}

}  // namespace

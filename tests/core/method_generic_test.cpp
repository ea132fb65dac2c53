// Generic tests that every registered method faces automatically (the registry is the loop).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "test_util.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"

namespace {

constexpr int64_t kD = 16;
constexpr int64_t kBudget = 12;

/// A small configuration of the method: tight budgets so eviction really happens.
vq::CacheConfig small_config(const vq::MethodInfo& m) {
  vq::CacheConfig c = vq::CacheConfig::defaults(m.id);
  auto has = [&](const char* name) { return vq::find_option(m, name) != nullptr; };
  if (has("n_sink")) c.set("n_sink", "2");
  if (has("recent")) c.set("recent", "0");
  if (has("window")) c.set("window", "4");
  if (has("kernel")) c.set("kernel", "3");
  if (has("budget")) c.set("budget", std::to_string(kBudget));
  if (has("block") && kD % 32 != 0)
    c.set("block", kD % 16 == 0 ? "16" : "8");  // VeloxQuant variant
  return c;
}

int64_t budget_of(const vq::CacheConfig& c, const vq::MethodInfo& m) {
  return vq::find_option(m, "budget") ? c.get_int("budget") : 0;
}

class MethodGeneric : public ::testing::TestWithParam<std::string> {
 protected:
  const vq::MethodInfo& info() const { return vq::find_method(GetParam()); }
  std::unique_ptr<vq::KVCache> make() const { return vq::make_cache(small_config(info()), kD); }
};

void expect_same(const vq::FetchResult& a, const vq::FetchResult& b) {
  ASSERT_EQ(a.n_kept, b.n_kept);
  ASSERT_EQ(a.positions, b.positions);
  ASSERT_EQ(a.keys.shape(), b.keys.shape());
  for (int64_t i = 0; i < a.keys.numel(); ++i) {
    ASSERT_EQ(a.keys.data()[i], b.keys.data()[i]) << "key element " << i;
    ASSERT_EQ(a.values.data()[i], b.values.data()[i]) << "value element " << i;
  }
}

TEST_P(MethodGeneric, BudgetRespectedAndPositionsValid) {
  auto cache = make();
  const int64_t budget = budget_of(cache->config(), info());
  const auto K = vqtest::random_tensor(1, 2, 80, kD, 1);
  const auto V = vqtest::random_tensor(1, 2, 80, kD, 2);
  // prefill of 20 tokens, then one at a time
  cache->update(K.slice_tokens(0, 20), V.slice_tokens(0, 20));
  for (int64_t s = 20; s < 80; ++s) {
    auto r = cache->update_and_fetch(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
    ASSERT_EQ(cache->offset(), s + 1);
    if (budget > 0) {
      ASSERT_LE(r.n_kept, budget) << "step " << s;
    }
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t i = 0; i < r.n_kept; ++i) {
        const int64_t p = r.positions[static_cast<size_t>(h * r.n_kept + i)];
        ASSERT_GE(p, 0);
        ASSERT_LE(p, s);
        if (i > 0) {
          ASSERT_LT(r.positions[static_cast<size_t>(h * r.n_kept + i - 1)], p);
        }
      }
    }
    ASSERT_EQ(cache->stats().tokens_seen, s + 1);
  }
  if (info().family == vq::Family::Transform) {
    EXPECT_EQ(cache->fetch().n_kept, 80);
  }
}

TEST_P(MethodGeneric, Deterministic) {
  const auto K = vqtest::random_tensor(2, 2, 40, kD, 3);
  const auto V = vqtest::random_tensor(2, 2, 40, kD, 4);
  auto a = make();
  auto b = make();
  a->update(K.slice_tokens(0, 25), V.slice_tokens(0, 25));
  b->update(K.slice_tokens(0, 25), V.slice_tokens(0, 25));
  for (int64_t s = 25; s < 40; ++s) {
    a->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
    b->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
  }
  expect_same(a->fetch(), b->fetch());
  EXPECT_EQ(a->stats().kept_bytes, b->stats().kept_bytes);
}

TEST_P(MethodGeneric, EmptyAndOneTokenInput) {
  auto cache = make();
  auto r0 = cache->update_and_fetch(vq::Tensor(1, 2, 0, kD), vq::Tensor(1, 2, 0, kD));
  EXPECT_EQ(r0.n_kept, 0);
  EXPECT_EQ(cache->offset(), 0);
  EXPECT_EQ(cache->stats().compression_ratio, 1.0);
  const auto K = vqtest::random_tensor(1, 2, 1, kD, 5);
  const auto V = vqtest::random_tensor(1, 2, 1, kD, 6);
  auto r1 = cache->update_and_fetch(K, V);
  ASSERT_EQ(r1.n_kept, 1);
  EXPECT_EQ(cache->offset(), 1);
  EXPECT_EQ(r1.positions, (std::vector<int64_t>{0, 0}));
  // Eviction methods hand back exactly what they kept; transform methods a reconstruction whose
  // error is a small fraction of the token's largest magnitude (4-bit formats included).
  float kmax = 0, vmax = 0;
  for (int64_t i = 0; i < K.numel(); ++i) {
    kmax = std::max(kmax, std::fabs(K.data()[i]));
    vmax = std::max(vmax, std::fabs(V.data()[i]));
  }
  const bool exact = info().family == vq::Family::Eviction;
  for (int64_t i = 0; i < K.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(r1.keys.data()[i]));
    ASSERT_TRUE(std::isfinite(r1.values.data()[i]));
    if (exact) {  // eviction methods store the rows they keep at fp16
      EXPECT_EQ(r1.keys.data()[i], vq::round_to_fp16(K.data()[i]));
      EXPECT_EQ(r1.values.data()[i], vq::round_to_fp16(V.data()[i]));
    } else {
      EXPECT_NEAR(r1.keys.data()[i], K.data()[i], 0.15f * kmax);
      EXPECT_NEAR(r1.values.data()[i], V.data()[i], 0.15f * vmax);
    }
  }
}

TEST_P(MethodGeneric, ShapesWithBatchAndHeads) {
  auto cache = make();
  const auto K = vqtest::random_tensor(2, 3, 30, kD, 7);
  const auto V = vqtest::random_tensor(2, 3, 30, kD, 8);
  auto r = cache->update_and_fetch(K, V);
  EXPECT_EQ(r.keys.B(), 2);
  EXPECT_EQ(r.keys.H(), 3);
  EXPECT_EQ(r.keys.D(), kD);
  EXPECT_EQ(r.values.shape(), r.keys.shape());
  EXPECT_EQ(static_cast<int64_t>(r.positions.size()), 2 * 3 * r.n_kept);
  const auto st = cache->stats();
  EXPECT_EQ(st.tokens_seen, 30);
  EXPECT_DOUBLE_EQ(st.full_seq_bytes, 2.0 * 3 * 30 * kD * 2 * 2);
  EXPECT_GT(st.kept_bytes, 0);
  EXPECT_DOUBLE_EQ(st.compression_ratio, st.full_seq_bytes / st.kept_bytes);
}

TEST_P(MethodGeneric, BatchesAndHeadsAreIndependent) {
  if (info().heads_coupled) GTEST_SKIP() << info().id << " couples the heads of a token row";
  const auto K = vqtest::random_tensor(2, 2, 50, kD, 9);
  const auto V = vqtest::random_tensor(2, 2, 50, kD, 10);
  auto joint = make();
  joint->update(K.slice_tokens(0, 10), V.slice_tokens(0, 10));
  for (int64_t s = 10; s < 50; ++s) joint->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
  const auto rj = joint->fetch();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < 2; ++h) {
      vq::Tensor k1 = vq::Tensor::from_fp32(K.head(b, h), 1, 1, 50, kD);
      vq::Tensor v1 = vq::Tensor::from_fp32(V.head(b, h), 1, 1, 50, kD);
      auto single = make();
      single->update(k1.slice_tokens(0, 10), v1.slice_tokens(0, 10));
      for (int64_t s = 10; s < 50; ++s)
        single->update(k1.slice_tokens(s, 1), v1.slice_tokens(s, 1));
      const auto rs = single->fetch();
      ASSERT_EQ(rs.n_kept, rj.n_kept);
      for (int64_t i = 0; i < rs.n_kept; ++i) {
        ASSERT_EQ(rs.positions[static_cast<size_t>(i)],
                  rj.positions[static_cast<size_t>((b * 2 + h) * rj.n_kept + i)]);
        for (int64_t d = 0; d < kD; ++d) {
          ASSERT_EQ(rs.keys.at(0, 0, i, d), rj.keys.at(b, h, i, d));
          ASSERT_EQ(rs.values.at(0, 0, i, d), rj.values.at(b, h, i, d));
        }
      }
    }
  }
}

TEST_P(MethodGeneric, RejectsBadInput) {
  auto cache = make();
  const auto K = vqtest::random_tensor(1, 2, 4, kD, 11);
  EXPECT_THROW(cache->update(vqtest::random_tensor(1, 2, 4, kD + 1, 1),
                             vqtest::random_tensor(1, 2, 4, kD + 1, 2)),
               vq::InvalidArgument);
  EXPECT_THROW(cache->update(K, vqtest::random_tensor(1, 2, 5, kD, 2)), vq::InvalidArgument);
  vq::Tensor bad = K;
  bad.at(0, 1, 2, 3) = std::nanf("");
  EXPECT_THROW(cache->update(bad, K), vq::InvalidArgument);
  bad.at(0, 1, 2, 3) = INFINITY;
  EXPECT_THROW(cache->update(K, bad), vq::InvalidArgument);
  vq::Tensor q = vqtest::random_tensor(1, 3, 4, kD, 3);  // 3 is not a multiple of H = 2
  EXPECT_THROW(cache->update(K, K, &q), vq::InvalidArgument);
  EXPECT_THROW(cache->update(vq::Tensor(0, 2, 4, kD), vq::Tensor(0, 2, 4, kD)),
               vq::InvalidArgument);
  EXPECT_EQ(cache->offset(), 0) << "a rejected update must not change the cache";
  cache->update(K, K);
  EXPECT_THROW(
      cache->update(vqtest::random_tensor(1, 3, 1, kD, 4), vqtest::random_tensor(1, 3, 1, kD, 5)),
      vq::InvalidArgument);  // H changed
}

// A key or value the cache's storage cannot hold (past fp16's 65504 for fp16 rows and the chunked
// codecs' open windows, past a block scale's range for q8_0 / q4_0) is refused by update(), naming
// the value and the limit, instead of reading back as +-inf; values just inside the range are held
// and read back finite, also after a chunked codec has encoded them.
TEST_P(MethodGeneric, ValuesBeyondTheStorageAreRefusedNamingThem) {
  auto cache = make();
  const vq::KVCache::StorableRange range = cache->storable_range();
  ASSERT_GT(range.max_abs, 0.0);
  const double flt_max = std::numeric_limits<float>::max();
  const auto K = vqtest::random_tensor(1, 2, 40, kD, 13);
  if (range.max_abs < flt_max) {
    vq::Tensor bad = K;
    bad.at(0, 1, 3, 5) = static_cast<float>(-std::min(1.5 * range.max_abs, flt_max));
    for (int kv = 0; kv < 2; ++kv) {
      try {
        if (kv == 0)
          cache->update(bad, K);
        else
          cache->update(K, bad);
        FAIL() << GetParam() << ": " << bad.at(0, 1, 3, 5) << " was accepted";
      } catch (const vq::InvalidArgument& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(kv == 0 ? "keys" : "values"), std::string::npos) << msg;
        EXPECT_NE(msg.find("h=1, s=3, d=5"), std::string::npos) << msg;
        EXPECT_NE(msg.find(range.what), std::string::npos) << msg;
      }
    }
    EXPECT_EQ(cache->offset(), 0) << "a rejected update must not change the cache";
  }
  // the largest magnitudes inside the range (rows of them: every block scale, PCA range and window
  // row at its extreme), then ordinary rows so that chunked codecs encode the large ones
  const auto big = static_cast<float>(std::min(range.max_abs, flt_max) * 0.99);
  vq::Tensor edge = K;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t d = 0; d < kD; ++d) edge.at(0, h, s, d) = (s + d) % 2 ? big : -big;
  cache->update(edge, edge);
  cache->update(K, K);
  const vq::FetchResult r = cache->fetch();
  for (int64_t i = 0; i < r.keys.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(r.keys.data()[i])) << GetParam() << ": key element " << i;
    ASSERT_TRUE(std::isfinite(r.values.data()[i])) << GetParam() << ": value element " << i;
  }
}

TEST_P(MethodGeneric, AcceptsTrueQueries) {
  auto cache = make();
  const auto K = vqtest::random_tensor(1, 2, 30, kD, 12);
  const auto V = vqtest::random_tensor(1, 2, 30, kD, 13);
  const auto Q = vqtest::random_tensor(1, 4, 30, kD, 14);  // GQA: 2 query heads per KV head
  cache->update(K.slice_tokens(0, 10), V.slice_tokens(0, 10), nullptr);
  for (int64_t s = 10; s < 30; ++s) {
    vq::Tensor q = Q.slice_tokens(s, 1);
    cache->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1), &q);
  }
  const int64_t budget = budget_of(cache->config(), info());
  if (budget > 0) {
    EXPECT_LE(cache->fetch().n_kept, budget);
  }
}

std::vector<std::string> all_ids() {
  std::vector<std::string> ids;
  for (const auto& m : vq::methods()) ids.push_back(m.id);
  return ids;
}

INSTANTIATE_TEST_SUITE_P(AllMethods, MethodGeneric, ::testing::ValuesIn(all_ids()),
                         [](const auto& info) { return info.param; });

TEST(Builder, OneCachePerLayerWithTheSameConfigAndDistinctSeeds) {
  auto config = vq::CacheConfig::parse("curdkv:budget=32,n_sink=2");
  auto caches = vq::build_caches(config, 5, 8, 42);
  ASSERT_EQ(caches.size(), 5u);
  for (int64_t l = 0; l < 5; ++l) {
    EXPECT_EQ(caches[l]->config(), config);
    EXPECT_EQ(caches[l]->context().layer, l);
    EXPECT_EQ(caches[l]->context().n_layers, 5);
    EXPECT_EQ(caches[l]->context().seed, vq::layer_seed(42, l));
    if (l > 0) {
      EXPECT_NE(caches[l]->context().seed, caches[l - 1]->context().seed);
    }
  }
  EXPECT_THROW(vq::build_caches(config, 0, 8), vq::InvalidArgument);
  EXPECT_THROW(vq::make_cache(config, 0), vq::InvalidArgument);
}

}  // namespace

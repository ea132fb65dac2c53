// Every cache processes its heads as pieces of a parallel loop (EvictionCache::do_update): the
// kept rows, their slots and their stored bytes must not depend on the thread count or on how
// the heads are cut into pieces. Each registered method with a cache (eviction policies, the
// transform and quantized stores built on the same cache, composed specs) runs a prefill chunk
// and then decode steps on 2 batch rows x 3 KV heads with 2 query heads each, with 1 thread
// and default pieces and with 2 and 3 threads and one head per piece; everything a head holds
// is compared bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/rng.hpp"
#include "core/thread_pool.hpp"
#include "test_util.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/row_source.hpp"
#include "veloxquant/tensor.hpp"
#include "veloxquant/threads.hpp"

namespace {

constexpr int64_t kB = 2, kH = 3, kG = 2;

vq::Tensor random_tensor(int64_t H, int64_t S, int64_t D, uint64_t seed) {
  vq::Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(kB * H * S * D));
  for (float& v : x) v = static_cast<float>(rng.normal());
  return vq::Tensor::from_fp32(x.data(), kB, H, S, D);
}

struct Held {
  std::vector<int64_t> positions;  // slot order
  std::vector<float> keys, values;
  double content_bytes = 0;
};

// Feeds S tokens of head_dim D (a prefill chunk, then single tokens and small chunks) and
// returns what every head holds.
std::vector<Held> run(const std::string& spec, int threads, int64_t piece, int64_t S = 90,
                      int64_t D = 32) {
  vq::set_thread_count(threads);
  vq::set_min_piece_macs(piece);
  const vq::Tensor K = random_tensor(kH, S, D, 1), V = random_tensor(kH, S, D, 2),
                   Q = random_tensor(kH * kG, S, D, 3);
  auto cache = vq::make_cache(vq::CacheConfig::parse(spec), D, 0, 1, 11);
  const std::vector<int64_t> chunks = {40, 1, 1, 1, 7, 1};
  int64_t s = 0;
  for (size_t i = 0; s < S; ++i) {
    const int64_t n = std::min(chunks[i % chunks.size()], S - s);
    const vq::Tensor q = Q.slice_tokens(s, n);
    cache->update(K.slice_tokens(s, n), V.slice_tokens(s, n), &q);
    s += n;
  }
  std::vector<Held> out;
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t h = 0; h < kH; ++h) {
      Held x;
      const int64_t n = cache->kept(b, h);
      const int64_t* p = cache->positions(b, h);
      x.positions.assign(p, p + n);
      x.keys.resize(static_cast<size_t>(n * D));
      x.values.resize(static_cast<size_t>(n * D));
      if (n > 0) {
        cache->keys(b, h).read(0, n, x.keys.data());
        cache->values(b, h).read(0, n, x.values.data());
      }
      x.content_bytes = cache->stats().content_bytes;
      out.push_back(std::move(x));
    }
  return out;
}

std::vector<std::string> all_specs() {
  std::vector<std::string> specs;
  for (const vq::MethodInfo& m : vq::methods()) {
    if (!m.make_cache) continue;
    specs.push_back(vq::find_option(m, "budget") != nullptr ? m.id + ":budget=24" : m.id);
  }
  specs.push_back("h2o:budget=24,heads=adaptive");
  specs.push_back("curdkv:budget=24,solver=exact");  // the weighted block W instead of trackers
  specs.push_back("curdkv:budget=24,solver=reference");
  specs.push_back("snapkv:budget=24+q4_0");
  specs.push_back("tova:budget=24+kvtc:bit_budget=64,chunk_tokens=8");
  return specs;
}

}  // namespace

TEST(EvictionThreads, EveryMethodHoldsTheSameBytesForAnyThreadCount) {
  vqtest::RestoreThreads restore;
  const std::vector<std::string> specs = all_specs();
  ASSERT_GT(specs.size(), 15u);
  for (const std::string& spec : specs) {
    SCOPED_TRACE(spec);
    const std::vector<Held> one = run(spec, 1, restore.piece);
    for (const auto& [threads, piece] : std::vector<std::pair<int, int64_t>>{{2, 1}, {3, 1}}) {
      const std::vector<Held> got = run(spec, threads, piece);
      ASSERT_EQ(got.size(), one.size());
      for (size_t i = 0; i < one.size(); ++i) {
        EXPECT_EQ(got[i].positions, one[i].positions)
            << "head " << i << ", " << threads << " threads";
        ASSERT_EQ(got[i].keys.size(), one[i].keys.size());
        EXPECT_EQ(std::memcmp(got[i].keys.data(), one[i].keys.data(), one[i].keys.size() * 4), 0)
            << "keys of head " << i << ", " << threads << " threads";
        EXPECT_EQ(std::memcmp(got[i].values.data(), one[i].values.data(), one[i].values.size() * 4),
                  0)
            << "values of head " << i << ", " << threads << " threads";
        EXPECT_EQ(got[i].content_bytes, one[i].content_bytes);
      }
    }
  }
}

// The methods' working buffers belong to the thread and are shared by every cache of a method
// on it: whatever caches of other head_dims left in them must not change what a cache holds.
// Each run on this thread (its buffers last used at another head_dim) is compared with the same
// run on a new thread (fresh buffers).
TEST(EvictionThreads, ScratchSharedAcrossHeadDimsChangesNothing) {
  vqtest::RestoreThreads restore;
  for (const std::string& spec : all_specs()) {
    SCOPED_TRACE(spec);
    for (int64_t D : {64, 32, 64, 32}) {  // q4_0 needs multiples of 32
      std::vector<Held> want;
      std::thread fresh([&] { want = run(spec, 1, restore.piece, 90, D); });
      fresh.join();
      const std::vector<Held> got = run(spec, 1, restore.piece, 90, D);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].positions, want[i].positions) << "D " << D << ", head " << i;
        EXPECT_EQ(got[i].keys, want[i].keys) << "D " << D << ", head " << i;
        EXPECT_EQ(got[i].values, want[i].values) << "D " << D << ", head " << i;
      }
    }
  }
}

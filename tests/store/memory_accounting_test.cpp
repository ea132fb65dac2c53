// What every cache allocates, measured with a malloc counter, against what its stats() report.
//
// This file is its own test program (vq_memory_tests): it interposes malloc/free/calloc/realloc/
// posix_memalign/aligned_alloc/memalign to keep a running count of live heap bytes (by
// malloc_usable_size), so that Eigen's and the STL's allocations are both seen. For each method of
// the registry, and for policy+codec compositions, a cache is fed the same tokens twice: once on
// a throwaway cache (so per-thread scratch that every cache on the thread shares is already
// allocated), then on the cache under test, whose growth of live bytes must match its reported
// kept_bytes within 5% plus a small fixed bound.
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "veloxquant/cache.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/tensor.hpp"
#include "veloxquant/threads.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define VQ_NO_MALLOC_COUNTER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define VQ_NO_MALLOC_COUNTER 1
#endif
#endif

namespace {
std::atomic<int64_t> g_live{0};
}

#ifndef VQ_NO_MALLOC_COUNTER
extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);

static void* counted(void* p) {
  if (p) g_live.fetch_add(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  return p;
}
static void uncount(void* p) {
  if (p) g_live.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
}
void* malloc(size_t n) {
  return counted(__libc_malloc(n));
}
void free(void* p) {
  uncount(p);
  __libc_free(p);
}
void* calloc(size_t a, size_t b) {
  return counted(__libc_calloc(a, b));
}
void* realloc(void* p, size_t n) {
  uncount(p);
  void* q = __libc_realloc(p, n);
  if (!q && n != 0) counted(p);  // failed: p is still live
  return counted(q);
}
void* memalign(size_t a, size_t n) {
  return counted(__libc_memalign(a, n));
}
void* aligned_alloc(size_t a, size_t n) {
  return counted(__libc_memalign(a, n));
}
int posix_memalign(void** out, size_t a, size_t n) {
  void* p = __libc_memalign(a, n);
  if (!p) return 12;  // ENOMEM
  *out = counted(p);
  return 0;
}
}
#endif

namespace {

struct Workload {
  int64_t H = 2, D = 128, S = 1024, chunk = 64, Hq = 4;
};

vq::Tensor random_tensor(int64_t H, int64_t S, int64_t D, uint64_t seed) {
  vq::Tensor t(1, H, S, D);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t.data()[i] = static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  return t;
}

void feed(vq::KVCache& c, const vq::Tensor& K, const vq::Tensor& V, const vq::Tensor& Q,
          int64_t chunk) {
  for (int64_t s = 0; s < K.S(); s += chunk) {
    const int64_t n = std::min(chunk, K.S() - s);
    const vq::Tensor k = K.slice_tokens(s, n), v = V.slice_tokens(s, n), q = Q.slice_tokens(s, n);
    c.update(k, v, &q);
  }
}

// Specs to check: every registered method at its defaults (eviction ones at budget 512, and at a
// budget far above the tokens held), plus compositions of policies with codecs.
std::vector<std::string> specs(int64_t D) {
  std::vector<std::string> out;
  for (const auto& m : vq::methods()) {
    if (m.family == vq::Family::Eviction) {
      const bool has_budget = vq::find_option(m, "budget") != nullptr;
      out.push_back(has_budget ? m.id + ":budget=256" : m.id);
      if (has_budget) out.push_back(m.id + ":budget=1073741824");
    } else {
      // q8_0 / q4_0 with llama.cpp's 32-value blocks need D % 32 == 0 (true here)
      out.push_back(m.id);
    }
  }
  (void)D;
  for (const auto& m : vq::methods()) {
    if (!m.make_row_codec) continue;
    out.push_back("snapkv:budget=256+" + m.id);
    out.push_back("h2o:budget=256+" + m.id);
  }
  return out;
}

TEST(MemoryAccounting, AllocatedMatchesReportedForEveryMethod) {
#ifdef VQ_NO_MALLOC_COUNTER
  GTEST_SKIP() << "the malloc counter is disabled under AddressSanitizer";
#else
  const Workload w;
  const vq::Tensor K = random_tensor(w.H, w.S, w.D, 1), V = random_tensor(w.H, w.S, w.D, 2),
                   Q = random_tensor(w.Hq, w.S, w.D, 3);
  ASSERT_GT(g_live.load(), 0) << "the malloc counter is not active";
  // One thread: the methods' working buffers belong to the threads that process heads (not to
  // a cache), and only this thread's are warmed below; a pool worker's first use would count.
  const int threads = vq::thread_count();
  vq::set_thread_count(1);
  {  // warm the per-thread scratch every cache on this thread shares (sized by the most rows):
     // the whole-cache attention of a budget that never evicts, and every eviction method's
     // scoring path (its kernels' thread-local blocks) at a budget that does
    auto warm = vq::make_cache("h2o:budget=1073741824", w.D);
    feed(*warm, K, V, Q, w.chunk);
    for (const auto& m : vq::methods()) {
      if (m.family != vq::Family::Eviction || vq::find_option(m, "budget") == nullptr) continue;
      auto c = vq::make_cache(m.id + ":budget=256", w.D);
      feed(*c, K, V, Q, w.chunk);
    }
  }
  for (const std::string& spec : specs(w.D)) {
    SCOPED_TRACE(spec);
    const int64_t before = g_live.load();
    auto cache = vq::make_cache(spec, w.D);
    feed(*cache, K, V, Q, w.chunk);
    const vq::CacheStats st = cache->stats();
    const int64_t grown = g_live.load() - before;
    const double reported = st.kept_bytes;
    const double parts = st.content_bytes + st.codec_param_bytes + st.policy_bytes +
                         st.index_bytes + st.overhead_bytes;
    EXPECT_DOUBLE_EQ(parts, reported) << "kept_bytes is not the sum of its parts";
    // malloc rounds each block up; the cache object, codecs and small vectors are fixed costs
    const double slack = 0.05 * reported + 64.0 * 1024;
    EXPECT_NEAR(static_cast<double>(grown), reported, slack)
        << "allocated " << grown << " B, reported " << reported << " B (content "
        << st.content_bytes << ", params " << st.codec_param_bytes << ", policy " << st.policy_bytes
        << ", index " << st.index_bytes << ", overhead " << st.overhead_bytes << ")";
    // A budget far above the tokens held costs nothing: the same as a budget of exactly the
    // tokens fed.
    if (const size_t at = spec.find("budget=1073741824"); at != std::string::npos) {
      std::string exact = spec;
      exact.replace(at, std::string("budget=1073741824").size(), "budget=" + std::to_string(w.S));
      auto same = vq::make_cache(exact, w.D);
      feed(*same, K, V, Q, w.chunk);
      EXPECT_NEAR(reported, same->stats().kept_bytes, 0.02 * reported + 4096.0) << exact;
    }
  }
  vq::set_thread_count(threads);
#endif
}

}  // namespace

// Session 30: a plain read of the same 1.1 GB of matrices in several patterns (per matrix on the
// pool's row pieces, or as one region per thread; with and without an 8 KB software prefetch;
// one or two streams per thread), optionally on transparent huge pages (second argument 1).
// Build: g++ -O3 -march=native -std=c++20 -I include -I src results/session30/decode_read/rd.cpp
//   build/lib/libveloxquant.a -lpthread -o rd ; ./rd 8 0
#include <immintrin.h>
#include <sys/mman.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include "core/thread_pool.hpp"
using namespace vq;
using clk = std::chrono::steady_clock;
static std::atomic<long long> sink;
template <int PF, int STREAMS>
static void readsum(const uint8_t* p, size_t n) {
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  if constexpr (STREAMS == 1) {
    for (size_t i = 0; i + 128 <= n; i += 128) {
      a = _mm512_add_epi64(a, _mm512_loadu_si512(p + i));
      b = _mm512_add_epi64(b, _mm512_loadu_si512(p + i + 64));
      if constexpr (PF > 0) _mm_prefetch((const char*)p + i + PF, _MM_HINT_T0);
    }
  } else {
    size_t h = (n / 2) & ~size_t(127);
    const uint8_t* q = p + h;
    for (size_t i = 0; i + 128 <= h; i += 128) {
      a = _mm512_add_epi64(a, _mm512_loadu_si512(p + i));
      b = _mm512_add_epi64(b, _mm512_loadu_si512(p + i + 64));
      c = _mm512_add_epi64(c, _mm512_loadu_si512(q + i));
      d = _mm512_add_epi64(d, _mm512_loadu_si512(q + i + 64));
      if constexpr (PF > 0) {
        _mm_prefetch((const char*)p + i + PF, _MM_HINT_T0);
        _mm_prefetch((const char*)q + i + PF, _MM_HINT_T0);
      }
    }
  }
  sink += _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d)));
}
struct Mat {
  size_t off, rows, rb;
};
int main(int argc, char** argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 8;
  bool huge = argc > 2 && atoi(argv[2]);
  std::vector<Mat> ms;
  size_t off = 0;
  auto add = [&](size_t r, size_t c) {
    size_t rb = c / 32 * 34;
    ms.push_back({off, r, rb});
    off += r * rb;
    off = (off + 4095) & ~size_t(4095);
  };
  for (int l = 0; l < 16; ++l) {
    add(2048, 2048);
    add(512, 2048);
    add(512, 2048);
    add(2048, 2048);
    add(8192, 2048);
    add(8192, 2048);
    add(2048, 8192);
  }
  add(32000, 2048);
  size_t total = off;
  uint8_t* buf = (uint8_t*)aligned_alloc(1 << 21, (total + (1 << 21)) & ~size_t((1 << 21) - 1));
  if (huge) madvise(buf, total, MADV_HUGEPAGE);
  parallel_for(total >> 21, 1,
               [&](int64_t b, int64_t e) { memset(buf + (b << 21), 1, (e - b) << 21); });
  memset(buf + ((total >> 21) << 21), 1, total - ((total >> 21) << 21));
  auto timeit = [&](const char* name, auto&& fn) {
    double best = 1e9;
    for (int r = 0; r < reps; ++r) {
      auto t0 = clk::now();
      fn();
      best = std::min(best, std::chrono::duration<double>(clk::now() - t0).count());
    }
    printf("%-28s %.2f ms %.1f GB/s\n", name, best * 1e3, total / best / 1e9);
  };
  auto per_matrix = [&](auto rd) {
    return [&, rd] {
      for (auto& m : ms) {
        int64_t units = m.rows / 16;
        int64_t grain = std::max<int64_t>(1, (1 << 17) / (16 * (m.rb / 34 * 32)));
        parallel_for(units, grain, [&](int64_t b, int64_t e) {
          rd(buf + m.off + b * 16 * m.rb, (e - b) * 16 * m.rb);
        });
      }
    };
  };
  for (int round = 0; round < 2; ++round) {
    timeit("per-matrix pf8K", per_matrix(readsum<8192, 1>));
    timeit("per-matrix nopf", per_matrix(readsum<0, 1>));
    timeit("per-matrix pf4K", per_matrix(readsum<4096, 1>));
    timeit("per-matrix pf16K", per_matrix(readsum<16384, 1>));
    timeit("per-matrix 2streams pf8K", per_matrix(readsum<8192, 2>));
    timeit("per-matrix 2streams nopf", per_matrix(readsum<0, 2>));
    timeit("one region pf8K", [&] {
      parallel_for(2, 1, [&](int64_t b, int64_t e) {
        size_t h = total / 2 & ~size_t(127);
        readsum<8192, 1>(buf + b * h, (e - b) * h);
      });
    });
    timeit("one region nopf", [&] {
      parallel_for(2, 1, [&](int64_t b, int64_t e) {
        size_t h = total / 2 & ~size_t(127);
        readsum<0, 1>(buf + b * h, (e - b) * h);
      });
    });
  }
}

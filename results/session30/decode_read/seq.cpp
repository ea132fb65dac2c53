// Session 30: are decode's weight products slower than a plain read of the same bytes?
// The 113 matrix-vector products of a 1B-shaped Q8_0 decode step (16 layers of q, k, v, o, gate,
// up, down, then the output matrix: 1.1 GB of distinct random matrices) against a read of the
// same matrices with the same row pieces, with and without an 8 KB software prefetch, all on the
// library's thread pool; the best of `reps` passes. Build (after the project's build):
//   g++ -O3 -march=native -std=c++20 -I include -I src results/session30/decode_read/seq.cpp
//       build/lib/libveloxquant.a -lzstd -lxxhash -lsentencepiece -lpcre2-8 -licuuc -lpthread -o
//       seq
//   ./seq 2 10      (threads, passes); ONEBUF=1 ./seq 2 10 copies the matrices into one
//   2 MiB-aligned buffer first touched by the pool, as rd.cpp reads them
#include <immintrin.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>
#include "core/thread_pool.hpp"
#include "kernels/matmul.hpp"
#include "veloxquant/weight_matrix.hpp"
static std::atomic<double> sink;
template <bool Pf>
static void readsum(const uint8_t* p, size_t n) {
  __m512i a = _mm512_setzero_si512(), b = a;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a = _mm512_add_epi64(a, _mm512_loadu_si512(p + i));
    b = _mm512_add_epi64(b, _mm512_loadu_si512(p + i + 64));
    if (Pf) _mm_prefetch((const char*)p + i + 8192, _MM_HINT_T0);
  }
  sink = sink + (double)_mm512_reduce_add_epi64(_mm512_add_epi64(a, b));
}
using namespace vq;
using clk = std::chrono::steady_clock;
struct M {
  std::string name;
  std::vector<uint8_t> buf;
  WeightMatrix w;
  size_t bytes() const { return w.row_bytes() * static_cast<uint64_t>(w.rows); }
};
int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  int reps = argc > 2 ? atoi(argv[2]) : 10;
  global_pool().resize(threads);
  std::mt19937_64 rng(1);
  std::vector<M> ms;
  auto add = [&](const char* n, int64_t r, int64_t c) {
    M m;
    m.name = n;
    uint64_t rb = ggml_row_bytes(GgmlType::Q8_0, c);
    m.buf.resize(rb * r);
    uint64_t* p = reinterpret_cast<uint64_t*>(m.buf.data());
    for (size_t i = 0; i < m.buf.size() / 8; ++i) p[i] = rng();
    for (size_t b = 0; b < m.buf.size(); b += 34) {
      m.buf[b] = 0x00;
      m.buf[b + 1] = 0x20;
    }
    m.w = WeightMatrix{GgmlType::Q8_0, nullptr, r, c};
    ms.push_back(std::move(m));
  };
  for (int l = 0; l < 16; ++l) {
    add("q", 2048, 2048);
    add("k", 512, 2048);
    add("v", 512, 2048);
    add("o", 2048, 2048);
    add("gate", 8192, 2048);
    add("up", 8192, 2048);
    add("down", 2048, 8192);
  }
  add("lm", 32000, 2048);
  add("big", 16384, 8192);
  double total = 0;
  for (auto& m : ms) {
    m.w.data = m.buf.data();
    if (m.name != "big") total += m.bytes();
  }
  if (getenv("ONEBUF")) {
    size_t sz = 0;
    for (auto& m : ms) sz += (m.bytes() + 4095) & ~size_t(4095);
    uint8_t* big = (uint8_t*)aligned_alloc(1 << 21, (sz + (1 << 21)) & ~size_t((1 << 21) - 1));
    parallel_for(sz >> 21, 1,
                 [&](int64_t b, int64_t e) { memset(big + (b << 21), 0, (e - b) << 21); });
    size_t off = 0;
    for (auto& m : ms) {
      memcpy(big + off, m.buf.data(), m.bytes());
      m.w.data = big + off;
      std::vector<uint8_t>().swap(m.buf);  // the copy is the only one left
      off += (m.bytes() + 4095) & ~size_t(4095);
    }
    printf("one buffer\n");
  }
  std::vector<float> x(8192, 0.01f), y(32000);
  for (int i = 0; i < 8192; ++i) x[i] = std::sin(i * 0.1f);
  std::map<std::string, double> best_by;
  double best = 1e9, bestbig = 1e9;
  for (int rep = 0; rep < reps; ++rep) {
    std::map<std::string, double> by;
    auto t0 = clk::now();
    for (auto& m : ms) {
      if (m.name == "big") continue;
      auto a = clk::now();
      kernels::matvec(m.w, x.data(), y.data());
      by[m.name] += std::chrono::duration<double>(clk::now() - a).count();
    }
    double t = std::chrono::duration<double>(clk::now() - t0).count();
    if (t < best) {
      best = t;
      best_by = by;
    }
    auto a = clk::now();
    kernels::matvec(ms.back().w, x.data(), y.data());
    bestbig = std::min(bestbig, std::chrono::duration<double>(clk::now() - a).count());
  }
  double bestr[2] = {1e9, 1e9};
  for (int rep = 0; rep < 2 * reps; ++rep) {
    const int pf = rep % 2;
    auto t0 = clk::now();
    for (auto& m : ms) {
      if (m.name == "big") continue;
      const uint8_t* p = m.w.data;
      const size_t rb = m.w.row_bytes();
      parallel_for(m.w.rows / 16, std::max<int64_t>(1, (1 << 17) / (16 * m.w.cols)),
                   [&](int64_t b, int64_t e) {
                     if (pf)
                       readsum<true>(p + b * 16 * rb, (e - b) * 16 * rb);
                     else
                       readsum<false>(p + b * 16 * rb, (e - b) * 16 * rb);
                   });
    }
    bestr[pf] = std::min(bestr[pf], std::chrono::duration<double>(clk::now() - t0).count());
  }
  printf("read seq, 8 KB prefetch: %.2f ms %.1f GB/s; no prefetch: %.2f ms %.1f GB/s\n",
         bestr[1] * 1e3, total / bestr[1] / 1e9, bestr[0] * 1e3, total / bestr[0] / 1e9);
  printf("threads %d: seq %.2f ms %.1f GB/s; big %.2f ms %.1f GB/s\n", threads, best * 1e3,
         total / best / 1e9, bestbig * 1e3, ms.back().bytes() / bestbig / 1e9);
  for (auto& [n, t] : best_by) {
    double bytes = 0;
    for (auto& m : ms)
      if (m.name == n) bytes += m.bytes();
    printf("  %-5s %.2f ms %.1f GB/s\n", n.c_str(), t * 1e3, bytes / t / 1e9);
  }
}

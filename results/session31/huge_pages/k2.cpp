// Session 31: the 113 Q8_0 products of a 1B-shaped decode step (distinct random matrices in
// one 2 MiB-aligned buffer, advised for huge pages when the second argument is 1) on the pool's
// two threads: the library's kernel, a copy of it whose request distance varies (0 to 32 KiB),
// and a plain read of the same row pieces; best of `reps` passes, the variants interleaved.
// Build:
//   g++ -O3 -march=native -std=c++20 -I include -I src results/session31/huge_pages/k2.cpp
//       build/lib/libveloxquant.a -lzstd -lxxhash -lsentencepiece -lpcre2-8 -licuuc -lpthread -o k2
//   ./k2 8 1 [rows2]   (passes, huge pages 0 / 1; rows2: the two-row variants instead of the
//                       request distances)
#include <immintrin.h>
#include <sys/mman.h>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "core/thread_pool.hpp"
#include "kernels/matmul.hpp"
#include "kernels/row_dot.hpp"
#include "veloxquant/tensor.hpp"
#include "veloxquant/weight_matrix.hpp"
using namespace vq;
using clk = std::chrono::steady_clock;
static std::atomic<double> sink;
static inline float h2f(const uint8_t* p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
static uintptr_t PF = 8192;
static void row1(const uint8_t* w, int64_t nb, const int16_t* q, const float* xs, float* out) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t* p = w + 34 * b;
    _mm_prefetch((const char*)p + PF, _MM_HINT_T0);
    __m512i s0 =
        _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(p + 2))),
                          _mm512_loadu_si512(q + 32 * b));
    a0 = _mm512_fmadd_ps(_mm512_set1_ps(h2f(p) * xs[b]), _mm512_cvtepi32_ps(s0), a0);
    __m512i s1 =
        _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(p + 36))),
                          _mm512_loadu_si512(q + 32 * b + 32));
    a1 = _mm512_fmadd_ps(_mm512_set1_ps(h2f(p + 34) * xs[b + 1]), _mm512_cvtepi32_ps(s1), a1);
  }
  *out = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}
// two rows from two far-apart places, blocks interleaved
static void row2(const uint8_t* w0, const uint8_t* w1, int64_t nb, const int16_t* q,
                 const float* xs, float* o0, float* o1) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, c0 = a0, c1 = a0;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t* p = w0 + 34 * b;
    const uint8_t* r = w1 + 34 * b;
    _mm_prefetch((const char*)p + PF, _MM_HINT_T0);
    _mm_prefetch((const char*)r + PF, _MM_HINT_T0);
    __m512i qa = _mm512_loadu_si512(q + 32 * b), qb = _mm512_loadu_si512(q + 32 * b + 32);
    __m512i s0 =
        _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(p + 2))), qa);
    __m512i t0 =
        _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(r + 2))), qa);
    a0 = _mm512_fmadd_ps(_mm512_set1_ps(h2f(p) * xs[b]), _mm512_cvtepi32_ps(s0), a0);
    c0 = _mm512_fmadd_ps(_mm512_set1_ps(h2f(r) * xs[b]), _mm512_cvtepi32_ps(t0), c0);
    __m512i s1 =
        _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(p + 36))), qb);
    __m512i t1 =
        _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(r + 36))), qb);
    a1 = _mm512_fmadd_ps(_mm512_set1_ps(h2f(p + 34) * xs[b + 1]), _mm512_cvtepi32_ps(s1), a1);
    c1 = _mm512_fmadd_ps(_mm512_set1_ps(h2f(r + 34) * xs[b + 1]), _mm512_cvtepi32_ps(t1), c1);
  }
  *o0 = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  *o1 = _mm512_reduce_add_ps(_mm512_add_ps(c0, c1));
}
struct M {
  std::string name;
  WeightMatrix w;
  size_t bytes() const { return w.row_bytes() * uint64_t(w.rows); }
};
int main(int argc, char** argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 10;
  int huge = argc > 2 ? atoi(argv[2]) : 1;
  global_pool().resize(2);
  std::vector<M> ms;
  auto add = [&](const char* n, int64_t r, int64_t c) {
    M m;
    m.name = n;
    m.w = WeightMatrix{GgmlType::Q8_0, nullptr, r, c};
    ms.push_back(m);
  };
  for (int l = 0; l < 16; l++) {
    add("q", 2048, 2048);
    add("k", 512, 2048);
    add("v", 512, 2048);
    add("o", 2048, 2048);
    add("gate", 8192, 2048);
    add("up", 8192, 2048);
    add("down", 2048, 8192);
  }
  add("lm", 32000, 2048);
  size_t sz = 0;
  for (auto& m : ms) sz += (m.bytes() + 4095) & ~size_t(4095);
  sz = (sz + (1 << 21)) & ~size_t((1 << 21) - 1);
  uint8_t* big = (uint8_t*)aligned_alloc(1 << 21, sz);
  if (huge) madvise(big, sz, MADV_HUGEPAGE);
  parallel_for(sz >> 21, 1, [&](int64_t b, int64_t e) {
    std::mt19937_64 rng(b);
    for (size_t i = (b << 21); i < size_t(e << 21); i += 8) {
      uint64_t v = rng();
      memcpy(big + i, &v, 8);
    }
  });
  size_t off = 0;
  double total = 0;
  for (auto& m : ms) {
    m.w.data = big + off;
    for (size_t b = 0; b < m.bytes(); b += 34) {
      big[off + b] = 0;
      big[off + b + 1] = 0x20;
    }
    off += (m.bytes() + 4095) & ~size_t(4095);
    total += m.bytes();
  }
  std::vector<float> x(8192), y(32000), y2(32000);
  for (int i = 0; i < 8192; i++) x[i] = std::sin(i * 0.1f);
  kernels::detail::RowDotInput in2048, in8192;
  kernels::detail::prepare_row_dot_input(GgmlType::Q8_0, x.data(), 2048, in2048);
  kernels::detail::prepare_row_dot_input(GgmlType::Q8_0, x.data(), 8192, in8192);
  // check custom vs library
  {
    auto& m = ms[0];
    kernels::matvec(m.w, x.data(), y.data());
    for (int r = 0; r < m.w.rows; r++)
      row1(m.w.data + r * m.w.row_bytes(), 64, in2048.q.data(), in2048.scale.data(), &y2[r]);
    double md = 0;
    for (int r = 0; r < m.w.rows; r++)
      md = std::max(md, (double)std::fabs(y[r] - y2[r]) / (1e-3 + std::fabs(y[r])));
    printf("custom vs lib rel diff %.2g\n", md);
  }
  auto run = [&](int mode) {
    for (auto& m : ms) {
      const auto& in = m.w.cols == 2048 ? in2048 : in8192;
      const int64_t nb = m.w.cols / 32;
      const uint64_t rb = m.w.row_bytes();
      const uint8_t* W = m.w.data;
      float* Y = y.data();
      if (mode == 0) {
        kernels::matvec(m.w, x.data(), Y);
        continue;
      }
      int64_t unit = 16, units = m.w.rows / unit;
      int64_t grain = std::max<int64_t>(1, (int64_t(1) << 17) / (unit * m.w.cols));
      parallel_for(units, grain, [&](int64_t b, int64_t e) {
        int64_t r0 = b * unit, r1 = e * unit;
        if (mode == 1) {
          for (int64_t r = r0; r < r1; r++)
            row1(W + r * rb, nb, in.q.data(), in.scale.data(), Y + r);
        } else if (mode == 2) {
          int64_t h = (r1 - r0) / 2;
          for (int64_t r = r0; r < r0 + h; r++)
            row2(W + r * rb, W + (r + h) * rb, nb, in.q.data(), in.scale.data(), Y + r, Y + r + h);
        } else if (mode == 3) {
          for (int64_t r = r0; r < r1; r += 2)
            row2(W + r * rb, W + (r + 1) * rb, nb, in.q.data(), in.scale.data(), Y + r, Y + r + 1);
        } else {
          const uint8_t* p = W + r0 * rb;
          size_t n = (r1 - r0) * rb;
          __m512i a = _mm512_setzero_si512(), c = a;
          for (size_t i = 0; i + 128 <= n; i += 128) {
            a = _mm512_add_epi64(a, _mm512_loadu_si512(p + i));
            c = _mm512_add_epi64(c, _mm512_loadu_si512(p + i + 64));
          }
          sink = sink + (double)_mm512_reduce_add_epi64(_mm512_add_epi64(a, c));
        }
      });
    }
  };
  if (argc > 3 && std::string(argv[3]) == "rows2") {
    // the library, the copy at 8 KiB, two rows at once (from the two halves of a piece, or
    // adjacent ones), and the plain read, the five interleaved
    const char* names[] = {"library", "custom 1 row", "2 rows, halves", "2 rows, adjacent",
                           "plain read"};
    double best[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
    for (int rep = 0; rep < reps; rep++)
      for (int k = 0; k < 5; k++) {
        const int mode = rep % 2 ? 4 - k : k;
        auto t0 = clk::now();
        run(mode);
        best[mode] = std::min(best[mode], std::chrono::duration<double>(clk::now() - t0).count());
      }
    for (int k = 0; k < 5; k++)
      printf("%-18s %.2f ms %.1f GB/s\n", names[k], best[k] * 1e3, total / best[k] / 1e9);
    return 0;
  }
  uintptr_t pfs[] = {0, 2048, 4096, 8192, 16384, 32768};
  double best[6] = {1e9, 1e9, 1e9, 1e9, 1e9, 1e9};
  double lib = 1e9, rd = 1e9;
  for (int rep = 0; rep < reps; rep++) {
    for (int k = 0; k < 6; k++) {
      int i = rep % 2 ? 5 - k : k;
      PF = pfs[i];
      auto t0 = clk::now();
      run(1);
      best[i] = std::min(best[i], std::chrono::duration<double>(clk::now() - t0).count());
    }
    auto t0 = clk::now();
    run(0);
    lib = std::min(lib, std::chrono::duration<double>(clk::now() - t0).count());
    t0 = clk::now();
    run(4);
    rd = std::min(rd, std::chrono::duration<double>(clk::now() - t0).count());
  }
  printf("library %.1f GB/s, read %.1f GB/s;", total / lib / 1e9, total / rd / 1e9);
  for (int k = 0; k < 6; k++) printf(" pf %lu: %.1f", (unsigned long)pfs[k], total / best[k] / 1e9);
  printf("\n");
}

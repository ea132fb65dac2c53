// Session 30: the library's Q8_0 matrix-vector product against a prototype on int8 input levels
// (two blocks per VNNI dpbusd, codes + 128 against the levels, the offset taken out per block in
// float), on one 512 x 2048 matrix (held in L2) and one 16384 x 8192 matrix (142 MB), each
// repeated back to back; the best of 6 rounds. Build (after the project's build):
//   g++ -O3 -march=native -std=c++20 -I include -I src results/session30/decode_read/q8v.cpp
//       build/lib/libveloxquant.a -lzstd -lxxhash -lsentencepiece -lpcre2-8 -licuuc -lpthread -o
//       q8v
//   ./q8v 1 ; ./q8v 2      (threads)
#include <immintrin.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "core/thread_pool.hpp"
#include "kernels/matmul.hpp"
#include "veloxquant/weight_matrix.hpp"
using namespace vq;
using clk = std::chrono::steady_clock;
struct In8 {
  std::vector<int8_t> q;
  std::vector<float> xs, corr;
};
static void prep(const float* x, int64_t cols, In8& in) {
  int64_t nb = cols / 32;
  in.q.resize(cols);
  in.xs.resize(nb);
  in.corr.resize(nb);
  for (int64_t b = 0; b < nb; ++b) {
    float am = 0;
    for (int i = 0; i < 32; ++i) am = std::max(am, std::fabs(x[32 * b + i]));
    float s = am / 127.f;
    float inv = s > 0 ? 1.f / s : 0.f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      int v = (int)std::nearbyint(x[32 * b + i] * inv);
      in.q[32 * b + i] = (int8_t)v;
      sum += v;
    }
    in.xs[b] = s;
    in.corr[b] = 128.f * s * (float)sum;
  }
}
static inline float h2f(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
static float row_vnni(const uint8_t* w, const In8& in, int64_t nb) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  float corr = 0;
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    for (int h = 0; h < 2; ++h) {
      const uint8_t* p = w + 34 * (b + 2 * h);
      __m512i c =
          _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(p + 2))),
                             _mm256_loadu_si256((const __m256i*)(p + 36)), 1);
      c = _mm512_xor_si512(c, flip);
      __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c,
                                      _mm512_loadu_si512(in.q.data() + 32 * (b + 2 * h)));
      float d0 = h2f(p), d1 = h2f(p + 34);
      __m512 sc = _mm512_insertf32x8(_mm512_set1_ps(d0 * in.xs[b + 2 * h]),
                                     _mm256_set1_ps(d1 * in.xs[b + 2 * h + 1]), 1);
      if (h == 0)
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, acc0);
      else
        acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, acc1);
      corr += d0 * in.corr[b + 2 * h] + d1 * in.corr[b + 2 * h + 1];
    }
  }
  float r = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) - corr;
  for (; b < nb; ++b) {
    const uint8_t* p = w + 34 * b;
    int s = 0;
    for (int i = 0; i < 32; ++i) s += (int)(int8_t)p[2 + i] * in.q[32 * b + i];
    r += h2f(p) * in.xs[b] * s;
  }
  return r;
}
int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  global_pool().resize(threads);
  std::mt19937_64 rng(1);
  auto make = [&](int64_t r, int64_t c) {
    std::vector<uint8_t> buf(ggml_row_bytes(GgmlType::Q8_0, c) * r);
    uint64_t* p = (uint64_t*)buf.data();
    for (size_t i = 0; i < buf.size() / 8; ++i) p[i] = rng();
    for (size_t b = 0; b < buf.size(); b += 34) {
      buf[b] = 0;
      buf[b + 1] = 0x20;
    }
    return buf;
  };
  for (auto [R, C] : std::vector<std::pair<int64_t, int64_t>>{{512, 2048}, {16384, 8192}}) {
    auto buf = make(R, C);
    WeightMatrix w{GgmlType::Q8_0, buf.data(), R, C};
    std::vector<float> x(C), y0(R), y1(R);
    for (int64_t i = 0; i < C; ++i) x[i] = std::sin(0.37f * i) * (1 + (i % 7));
    In8 in;
    double errmax = 0, ref = 0;
    int reps = R < 1000 ? 2000 : 10;
    double t0b = 1e9, t1b = 1e9;
    for (int round = 0; round < 6; ++round) {
      auto a = clk::now();
      for (int k = 0; k < reps; ++k) kernels::matvec(w, x.data(), y0.data());
      t0b = std::min(t0b, std::chrono::duration<double>(clk::now() - a).count() / reps);
      a = clk::now();
      for (int k = 0; k < reps; ++k) {
        prep(x.data(), C, in);
        parallel_for(R / 16, std::max<int64_t>(1, (1 << 17) / (16 * C)),
                     [&](int64_t b0, int64_t b1) {
                       for (int64_t r = b0 * 16; r < b1 * 16; ++r)
                         y1[r] = row_vnni(buf.data() + r * w.row_bytes(), in, C / 32);
                     });
      }
      t1b = std::min(t1b, std::chrono::duration<double>(clk::now() - a).count() / reps);
    }
    for (int64_t r = 0; r < R; ++r) {
      errmax = std::max(errmax, (double)std::fabs(y0[r] - y1[r]));
      ref = std::max(ref, (double)std::fabs(y0[r]));
    }
    double bytes = buf.size();
    printf(
        "%ldx%ld threads %d: library %.1f us (%.1f GB/s)  vnni-int8 %.1f us (%.1f GB/s)  "
        "max|diff|/max|y| %.2e\n",
        R, C, threads, t0b * 1e6, bytes / t0b / 1e9, t1b * 1e6, bytes / t1b / 1e9, errmax / ref);
  }
}

// Session 32: the Q8_0 row kernel's compute, one thread, 256 rows x 2048 from L2 (v0: the
// library's loop before this session; vE: the 16-block factors of row_dot.cpp's q8_0_d16; vC /
// vdp: int8 input levels with dpbusd, not kept: they round the input 256 times coarser), and
// the same kernels streaming a large buffer on two threads. Standalone:
//   g++ -O3 -march=native -std=c++20 results/session32/q8_kernel.cpp -o q8 -lpthread && ./q8 64
// (argument: rows of the large buffer / 8192).
#include <immintrin.h>
#include <sys/mman.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static inline float half_at(const uint8_t* p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
constexpr int64_t KB = 34;
template <bool Pf>
inline void pf(const uint8_t* p) {
  if constexpr (Pf) _mm_prefetch((const char*)(p + 8192), _MM_HINT_T0);
}
template <bool Pf>
float v0(const uint8_t* w, int64_t nb, const int16_t* q, const float* xs) {
  __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int64_t b = 0; b < nb; b += 2) {
    pf<Pf>(w + KB * b);
    for (int k = 0; k < 2; k++) {
      const uint8_t* p = w + KB * (b + k);
      __m512i s =
          _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(p + 2))),
                            _mm512_loadu_si512(q + 32 * (b + k)));
      a[k] = _mm512_fmadd_ps(_mm512_set1_ps(half_at(p) * xs[b + k]), _mm512_cvtepi32_ps(s), a[k]);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
}
template <bool Pf>
float v4acc(const uint8_t* w, int64_t nb, const int16_t* q, const float* xs) {
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                 _mm512_setzero_ps()};
  for (int64_t b = 0; b < nb; b += 4) {
    pf<Pf>(w + KB * b);
    pf<Pf>(w + KB * b + 64);
    for (int k = 0; k < 4; k++) {
      const uint8_t* p = w + KB * (b + k);
      __m512i s =
          _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(p + 2))),
                            _mm512_loadu_si512(q + 32 * (b + k)));
      a[k] = _mm512_fmadd_ps(_mm512_set1_ps(half_at(p) * xs[b + k]), _mm512_cvtepi32_ps(s), a[k]);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}
// int32 accumulate 2 blocks' madd into one before float? no: different scales. variant: int8 levels
// dpbusd pairs
template <bool Pf>
float vdp(const uint8_t* w, int64_t nb, const int8_t* q8, const float* xs, const int32_t* qs128) {
  // pair of blocks: lanes 0-7 block A, 8-15 block B
  __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  const __m512i x80 = _mm512_set1_epi8((char)0x80);
  for (int64_t b = 0; b < nb; b += 4) {
    pf<Pf>(w + KB * b);
    pf<Pf>(w + KB * b + 64);
    for (int k = 0; k < 2; k++) {
      const uint8_t* p = w + KB * (b + 2 * k);
      __m512i c =
          _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(p + 2))),
                             _mm256_loadu_si256((const __m256i*)(p + KB + 2)), 1);
      c = _mm512_xor_si512(c, x80);
      // start = -128*sum q per 4 (precomputed per lane)
      __m512i s = _mm512_dpbusd_epi32(_mm512_loadu_si512(qs128 + 8 * (b + 2 * k)), c,
                                      _mm512_loadu_si512(q8 + 32 * (b + 2 * k)));
      __m512 f = _mm512_mul_ps(
          _mm512_insertf32x8(_mm512_set1_ps(half_at(p)), _mm256_set1_ps(half_at(p + KB)), 1),
          _mm512_insertf32x8(_mm512_set1_ps(xs[b + 2 * k]), _mm256_set1_ps(xs[b + 2 * k + 1]), 1));
      a[k] = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(s), a[k]);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
}
template <bool Pf>
float vg(const uint8_t* w, int64_t nb, const int16_t* q, const float* xs) {
  __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  const __m512i at =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(KB));
  for (int64_t b = 0; b < nb; b += 16) {
    const uint8_t* p0 = w + KB * b;
    const __m512 f16 =
        _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(at, p0, 1))),
                      _mm512_loadu_ps(xs + b));
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) {
      const uint8_t* p = p0 + KB * k;
      if (k % 2 == 0) pf<Pf>(p);
      __m512i s =
          _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(p + 2))),
                            _mm512_loadu_si512(q + 32 * (b + k)));
      a[k % 2] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_set1_epi32(k), f16),
                                 _mm512_cvtepi32_ps(s), a[k % 2]);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
}
template <bool Pf>
float vdg(const uint8_t* w, int64_t nb, const int8_t* q8, const float* xs, const int32_t* qs128) {
  __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  const __m512i x80 = _mm512_set1_epi8((char)0x80);
  const __m512i at =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(KB));
  for (int64_t b = 0; b < nb; b += 16) {
    const uint8_t* p0 = w + KB * b;
    const __m512 f16 =
        _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(at, p0, 1))),
                      _mm512_loadu_ps(xs + b));
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
      const uint8_t* p = p0 + KB * 2 * k;
      pf<Pf>(p);
      __m512i c =
          _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(p + 2))),
                             _mm256_loadu_si256((const __m256i*)(p + KB + 2)), 1);
      c = _mm512_xor_si512(c, x80);
      __m512i s = _mm512_dpbusd_epi32(_mm512_loadu_si512(qs128 + 8 * (b + 2 * k)), c,
                                      _mm512_loadu_si512(q8 + 32 * (b + 2 * k)));
      const __m512i idx = _mm512_setr_epi32(2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k,
                                            2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1,
                                            2 * k + 1, 2 * k + 1, 2 * k + 1);
      a[k % 2] = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx, f16), _mm512_cvtepi32_ps(s), a[k % 2]);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
}
template <bool Pf>
float vA(const uint8_t* w, int64_t nb, const int16_t* q, const float* xs) {
  __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  alignas(64) float f[16];
  for (int64_t b = 0; b < nb; b += 16) {
    const uint8_t* p0 = w + KB * b;
    for (int k = 0; k < 16; k++) f[k] = half_at(p0 + KB * k) * xs[b + k];
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) {
      const uint8_t* p = p0 + KB * k;
      if (k % 2 == 0) pf<Pf>(p);
      __m512i s =
          _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(p + 2))),
                            _mm512_loadu_si512(q + 32 * (b + k)));
      a[k % 2] = _mm512_fmadd_ps(_mm512_set1_ps(f[k]), _mm512_cvtepi32_ps(s), a[k % 2]);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
}
template <bool Pf>
float vB(const uint8_t* w, int64_t nb, const int8_t* q8, const float* xs, const int32_t* qs128) {
  __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  const __m512i x80 = _mm512_set1_epi8((char)0x80);
  alignas(64) float f[16];
  for (int64_t b = 0; b < nb; b += 16) {
    const uint8_t* p0 = w + KB * b;
    for (int k = 0; k < 16; k++) f[k] = half_at(p0 + KB * k) * xs[b + k];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
      const uint8_t* p = p0 + KB * 2 * k;
      pf<Pf>(p);
      __m512i c =
          _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(p + 2))),
                             _mm256_loadu_si256((const __m256i*)(p + KB + 2)), 1);
      c = _mm512_xor_si512(c, x80);
      __m512i s = _mm512_dpbusd_epi32(_mm512_loadu_si512(qs128 + 8 * (b + 2 * k)), c,
                                      _mm512_loadu_si512(q8 + 32 * (b + 2 * k)));
      __m512 sf = _mm512_cvtepi32_ps(s);
      a[0] = _mm512_mask3_fmadd_ps(_mm512_set1_ps(f[2 * k]), sf, a[0], 0x00FF);
      a[1] = _mm512_mask3_fmadd_ps(_mm512_set1_ps(f[2 * k + 1]), sf, a[1], 0xFF00);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
}
template <int M>
float ve(const uint8_t* w, int64_t nb, const int16_t* q, const float* xs) {
  __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  __m512i ia[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
  for (int64_t b = 0; b < nb; b += 2) {
    for (int k = 0; k < 2; k++) {
      const uint8_t* p = w + KB * (b + k);
      if constexpr (M == 1) {  // no float: int accumulate
        __m512i s =
            _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(p + 2))),
                              _mm512_loadu_si512(q + 32 * (b + k)));
        ia[k] = _mm512_add_epi32(ia[k], s);
      } else if constexpr (M == 2) {  // no madd
        __m512i s = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(p + 2)));
        a[k] = _mm512_fmadd_ps(_mm512_set1_ps(half_at(p) * xs[b + k]), _mm512_cvtepi32_ps(s), a[k]);
      } else if constexpr (M == 3) {  // constant factor
        __m512i s =
            _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(p + 2))),
                              _mm512_loadu_si512(q + 32 * (b + k)));
        a[k] = _mm512_fmadd_ps(_mm512_set1_ps(xs[b + k]), _mm512_cvtepi32_ps(s), a[k]);
      } else {  // M==4: only loads + widen
        ia[k] = _mm512_add_epi16(ia[k],
                                 _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(p + 2))));
      }
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1])) +
         (float)_mm512_reduce_add_epi32(_mm512_add_epi32(ia[0], ia[1]));
}
// 16 blocks' d (fp16 at byte 34k of p0) as 16 floats, without a gather: two 64-byte windows per
// four blocks, bytes picked by vpermt2b.
static inline __m512 d16(const uint8_t* p0) {
  // blocks 4g..4g+3: d at 34*(4g+j) = 136g + 34j, window at 136g (128 bytes: j=0..3 -> 0,34,68,102)
  __m128i r[4];
  const __m512i idx = _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, 0x6766454423220100LL);
  for (int g = 0; g < 4; g++) {
    const uint8_t* p = p0 + 136 * g;
    __m512i lo = _mm512_loadu_si512(p), hi = _mm512_loadu_si512(p + 64);
    r[g] = _mm512_castsi512_si128(_mm512_permutex2var_epi8(lo, idx, hi));
  }
  __m128i a = _mm_unpacklo_epi64(r[0], r[1]), b = _mm_unpacklo_epi64(r[2], r[3]);
  __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
  return _mm512_cvtph_ps(h);
}
template <bool Pf>
float vC(const uint8_t* w, int64_t nb, const int8_t* q8, const float* xs, const int32_t* qs128) {
  __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  const __m512i x80 = _mm512_set1_epi8((char)0x80);
  for (int64_t b = 0; b < nb; b += 16) {
    const uint8_t* p0 = w + KB * b;
    const __m512 f16 = _mm512_mul_ps(d16(p0), _mm512_loadu_ps(xs + b));
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
      const uint8_t* p = p0 + KB * 2 * k;
      pf<Pf>(p);
      __m512i c =
          _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(p + 2))),
                             _mm256_loadu_si256((const __m256i*)(p + KB + 2)), 1);
      c = _mm512_xor_si512(c, x80);
      __m512i s = _mm512_dpbusd_epi32(_mm512_loadu_si512(qs128 + 8 * (b + 2 * k)), c,
                                      _mm512_loadu_si512(q8 + 32 * (b + 2 * k)));
      const __m512i idx = _mm512_setr_epi32(2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k,
                                            2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1,
                                            2 * k + 1, 2 * k + 1, 2 * k + 1);
      a[k % 2] = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx, f16), _mm512_cvtepi32_ps(s), a[k % 2]);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
}
template <bool Pf>
float vD(const uint8_t* w, int64_t nb, const int16_t* q, const float* xs) {
  __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int64_t b = 0; b < nb; b += 16) {
    const uint8_t* p0 = w + KB * b;
    const __m512 f16 = _mm512_mul_ps(d16(p0), _mm512_loadu_ps(xs + b));
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) {
      const uint8_t* p = p0 + KB * k;
      if (k % 2 == 0) pf<Pf>(p);
      __m512i s =
          _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(p + 2))),
                            _mm512_loadu_si512(q + 32 * (b + k)));
      a[k % 2] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_set1_epi32(k), f16),
                                 _mm512_cvtepi32_ps(s), a[k % 2]);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
}
template <bool Pf>
float vE(const uint8_t* w, int64_t nb, const int16_t* q, const float* xs) {
  __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  alignas(64) float f[16];
  for (int64_t b = 0; b < nb; b += 16) {
    const uint8_t* p0 = w + KB * b;
    _mm512_store_ps(f, _mm512_mul_ps(d16(p0), _mm512_loadu_ps(xs + b)));
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) {
      const uint8_t* p = p0 + KB * k;
      if (k % 2 == 0) pf<Pf>(p);
      __m512i s =
          _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(p + 2))),
                            _mm512_loadu_si512(q + 32 * (b + k)));
      a[k % 2] = _mm512_fmadd_ps(_mm512_set1_ps(f[k]), _mm512_cvtepi32_ps(s), a[k % 2]);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
}
// pure read of same bytes
template <bool Pf>
float vread(const uint8_t* w, int64_t nb, const int16_t*, const float*) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0;
  int64_t n = nb * KB;
  int64_t i = 0;
  for (; i + 128 <= n; i += 128) {
    pf<Pf>(w + i);
    pf<Pf>(w + i + 64);
    a0 = _mm512_add_epi32(a0, _mm512_loadu_si512(w + i));
    a1 = _mm512_add_epi32(a1, _mm512_loadu_si512(w + i + 64));
  }
  return (float)_mm512_reduce_add_epi32(_mm512_add_epi32(a0, a1));
}
int main(int argc, char** argv) {
  int64_t cols = 2048, rowsL2 = 256,
          rowsBig = atoi(argc > 1 ? argv[1] : "16384") * 8;  // big: 16384*8 rows x 2048 = 1.1GB
  int64_t nb = cols / 32;
  int64_t rb = nb * KB;
  size_t big = rowsBig * rb;
  big = (big + (2 << 20) - 1) & ~size_t((2 << 20) - 1);
  uint8_t* W = (uint8_t*)aligned_alloc(2 << 20, big);
  madvise(W, big, MADV_HUGEPAGE);
  for (size_t i = 0; i < big; i++) W[i] = (uint8_t)(i * 2654435761u >> 13);
  for (int64_t r = 0; r < rowsBig; r++)
    for (int64_t b = 0; b < nb; b++) {
      uint16_t h = _cvtss_sh(0.01f * (1 + ((r + b) % 7)), 0);
      memcpy(W + r * rb + b * KB, &h, 2);
    }
  std::vector<int16_t> q(cols);
  std::vector<int8_t> q8(cols);
  std::vector<float> xs(nb);
  std::vector<int32_t> qs(cols / 4);
  for (int i = 0; i < cols; i++) {
    q[i] = (int16_t)((i * 37) % 2000 - 1000);
    q8[i] = (int8_t)((i * 37) % 250 - 125);
  }
  for (int b = 0; b < nb; b++) xs[b] = 0.001f * (b + 1);
  for (int i = 0; i < cols / 4; i++) {
    int s = 0;
    for (int j = 0; j < 4; j++) s += q8[4 * i + j];
    qs[i] = -128 * s;
  }
  auto L2 = [&](const char* name, auto fn) {
    double best = 1e9;
    volatile float sink = 0;
    for (int rep = 0; rep < 300; rep++) {
      double t0 = now();
      float s = 0;
      for (int64_t r = 0; r < rowsL2; r++) s += fn(W + r * rb);
      sink = sink + s;
      best = std::min(best, now() - t0);
    }
    printf("%-8s L2  %.3f ns/block  %.1f GB/s\n", name, best * 1e9 / (rowsL2 * nb),
           rowsL2 * rb / best / 1e9);
  };
  auto BIG = [&](const char* name, auto fn, int T) {
    double best = 1e9;
    volatile float sink = 0;
    for (int rep = 0; rep < 3; rep++) {
      double t0 = now();
      std::vector<std::thread> th;
      for (int t = 0; t < T; t++)
        th.emplace_back([&, t] {
          float s = 0;
          for (int64_t r = t * rowsBig / T; r < (t + 1) * rowsBig / T; r++) s += fn(W + r * rb);
          sink = sink + s;
        });
      for (auto& x : th) x.join();
      best = std::min(best, now() - t0);
    }
    printf("%-8s big T%d  %.1f GB/s\n", name, T, rowsBig * rb / best / 1e9);
  };
  auto f0 = [&](const uint8_t* w) { return v0<false>(w, nb, q.data(), xs.data()); };
  auto f0p = [&](const uint8_t* w) { return v0<true>(w, nb, q.data(), xs.data()); };
  auto f4 = [&](const uint8_t* w) { return v4acc<false>(w, nb, q.data(), xs.data()); };
  auto f4p = [&](const uint8_t* w) { return v4acc<true>(w, nb, q.data(), xs.data()); };
  auto fd = [&](const uint8_t* w) { return vdp<false>(w, nb, q8.data(), xs.data(), qs.data()); };
  auto fdp = [&](const uint8_t* w) { return vdp<true>(w, nb, q8.data(), xs.data(), qs.data()); };
  auto fg = [&](const uint8_t* w) { return vg<false>(w, nb, q.data(), xs.data()); };
  auto fgp = [&](const uint8_t* w) { return vg<true>(w, nb, q.data(), xs.data()); };
  auto fdg = [&](const uint8_t* w) { return vdg<false>(w, nb, q8.data(), xs.data(), qs.data()); };
  auto fdgp = [&](const uint8_t* w) { return vdg<true>(w, nb, q8.data(), xs.data(), qs.data()); };
  auto fA = [&](const uint8_t* w) { return vA<false>(w, nb, q.data(), xs.data()); };
  auto fAp = [&](const uint8_t* w) { return vA<true>(w, nb, q.data(), xs.data()); };
  auto fB = [&](const uint8_t* w) { return vB<false>(w, nb, q8.data(), xs.data(), qs.data()); };
  auto fBp = [&](const uint8_t* w) { return vB<true>(w, nb, q8.data(), xs.data(), qs.data()); };
  auto e1 = [&](const uint8_t* w) { return ve<1>(w, nb, q.data(), xs.data()); };
  auto e2 = [&](const uint8_t* w) { return ve<2>(w, nb, q.data(), xs.data()); };
  auto e3 = [&](const uint8_t* w) { return ve<3>(w, nb, q.data(), xs.data()); };
  auto e4 = [&](const uint8_t* w) { return ve<4>(w, nb, q.data(), xs.data()); };
  auto fC = [&](const uint8_t* w) { return vC<false>(w, nb, q8.data(), xs.data(), qs.data()); };
  auto fCp = [&](const uint8_t* w) { return vC<true>(w, nb, q8.data(), xs.data(), qs.data()); };
  auto fD = [&](const uint8_t* w) { return vD<false>(w, nb, q.data(), xs.data()); };
  auto fDp = [&](const uint8_t* w) { return vD<true>(w, nb, q.data(), xs.data()); };
  auto fE = [&](const uint8_t* w) { return vE<false>(w, nb, q.data(), xs.data()); };
  auto fr = [&](const uint8_t* w) { return vread<false>(w, nb, q.data(), xs.data()); };
  auto frp = [&](const uint8_t* w) { return vread<true>(w, nb, q.data(), xs.data()); };
  {
    double e0 = f0(W), ed = fd(W), eC = fC(W), eD = fD(W);
    printf("check vE %.6f v0 %.6f vD %.6f | vdp %.6f vC %.6f\n", fE(W), e0, eD, ed, eC);
  }
  for (int round = 0; round < 2; round++) {
    L2("v0", f0);
    L2("vC", fC);
    L2("vD", fD);
    L2("vE", fE);
    L2("v0", f0);
    L2("vC", fC);
    L2("vD", fD);
    L2("vE", fE);
  }
}

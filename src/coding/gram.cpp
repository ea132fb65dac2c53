#include "coding/gram.hpp"

#include <algorithm>

#include "coding/latent_kernels.hpp"  // madd

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace vq::coding {

void gram_lower_ref(const float* X, int64_t n, int64_t D, float* G) {
  for (int64_t i = 0; i < D; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      float acc = 0.0f;
      for (int64_t t = 0; t < n; ++t) acc = madd(X[t * D + i], X[t * D + j], acc);
      G[i * D + j] = acc;
    }
}

namespace {

// Entries (i, j) of the lower triangle for i in [i0, i1), j in [j0, min(j1, i + 1)), summed over
// rows [t0, t1) on top of what G holds: the scalar edges of the blocked kernel.
void edge(const float* X, int64_t D, int64_t t0, int64_t t1, int64_t i0, int64_t i1, int64_t j0,
          int64_t j1, float* G) {
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = j0; j < std::min(j1, i + 1); ++j) {
      float acc = G[i * D + j];
      for (int64_t t = t0; t < t1; ++t) acc = madd(X[t * D + i], X[t * D + j], acc);
      G[i * D + j] = acc;
    }
}

#if defined(__AVX2__) && defined(__FMA__)

struct V256 {
  using T = __m256;
  static constexpr int W = 8;
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T set1(float a) { return _mm256_set1_ps(a); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
};

#if defined(__AVX512F__)
struct V512 {
  using T = __m512;
  static constexpr int W = 16;
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T set1(float a) { return _mm512_set1_ps(a); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
};
#endif

// Rows i0 .. i0 + R - 1 by columns j0 .. j0 + C W - 1, over rows t0 .. t1 - 1 of X, on top of
// what G holds (one accumulator per entry, terms in t order).
template <class V, int R, int C>
inline void block(const float* X, int64_t D, int64_t t0, int64_t t1, int64_t i0, int64_t j0,
                  float* G) {
  typename V::T acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = V::load(G + (i0 + r) * D + j0 + c * V::W);
  for (int64_t t = t0; t < t1; ++t) {
    const float* x = X + t * D;
    typename V::T b[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) b[c] = V::load(x + j0 + c * V::W);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const typename V::T a = V::set1(x[i0 + r]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = V::fmadd(a, b[c], acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) V::store(G + (i0 + r) * D + j0 + c * V::W, acc[r][c]);
}

template <class V, int R, int C>
void gram_blocked(const float* X, int64_t n, int64_t D, float* G) {
  constexpr int64_t kPanel = 64;  // rows of X per pass: 64 x D floats stay in L1 at D <= 128
  constexpr int64_t CW = C * V::W;
  for (int64_t t0 = 0; t0 < n; t0 += kPanel) {
    const int64_t t1 = std::min(n, t0 + kPanel);
    int64_t i0 = 0;
    for (; i0 + R <= D; i0 += R) {
      int64_t j0 = 0;
      // blocks that hold part of the lower triangle of rows i0 .. i0 + R - 1
      for (; j0 + CW <= D && j0 < i0 + R; j0 += CW) block<V, R, C>(X, D, t0, t1, i0, j0, G);
      edge(X, D, t0, t1, i0, i0 + R, j0, i0 + R, G);
    }
    edge(X, D, t0, t1, i0, D, 0, D, G);
  }
}

#endif

}  // namespace

void gram_lower(const float* X, int64_t n, int64_t D, float* G) {
  std::fill(G, G + D * D, 0.0f);
#if defined(__AVX512F__)
  gram_blocked<V512, 8, 2>(X, n, D, G);
#elif defined(__AVX2__) && defined(__FMA__)
  gram_blocked<V256, 6, 2>(X, n, D, G);
#else
  edge(X, D, 0, n, 0, D, 0, D, G);
#endif
}

}  // namespace vq::coding

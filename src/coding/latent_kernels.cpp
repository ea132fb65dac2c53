#include "coding/latent_kernels.hpp"

#include <cmath>
#include <type_traits>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VQ_LATENT_AVX2 1
#endif

namespace vq::coding {

namespace {

/// One multiply-add, fused when the target has FMA (what the vector kernel does per lane).
inline float madd(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

}  // namespace

void unproject_rows_ref(const float* lat, int64_t k, int64_t n, const float* basis,
                        const float* mean, int64_t D, float* out) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) acc = madd(lat[j * n + t], basis[j * D + d], acc);
      out[t * D + d] = mean[d] + acc;
    }
}

#if VQ_LATENT_AVX2

namespace {

// R rows (t0 .. t0 + R - 1) x 16 columns (d0 .. d0 + 15): 2R accumulators, each summed over j
// in order with one fused multiply-add per term, then the mean added.
template <int R>
inline void block16(const float* lat, int64_t k, int64_t n, const float* basis, const float* mean,
                    int64_t D, float* out, int64_t t0, int64_t d0) {
  __m256 a0[R], a1[R];
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
  const float* l = lat + t0;
  const float* b = basis + d0;
  for (int64_t j = 0; j < k; ++j, l += n, b += D) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(l + r);
      a0[r] = _mm256_fmadd_ps(x, b0, a0[r]);
      a1[r] = _mm256_fmadd_ps(x, b1, a1[r]);
    }
  }
  const __m256 m0 = _mm256_loadu_ps(mean + d0);
  const __m256 m1 = _mm256_loadu_ps(mean + d0 + 8);
  for (int r = 0; r < R; ++r) {
    float* o = out + (t0 + r) * D + d0;
    _mm256_storeu_ps(o, _mm256_add_ps(m0, a0[r]));
    _mm256_storeu_ps(o + 8, _mm256_add_ps(m1, a1[r]));
  }
}

// 6 rows x 16 columns from a packed latent panel p[j * 6 + r] = lat[j, t0 + r].
inline void block16_packed(const float* p, int64_t k, const float* basis, const float* mean,
                           int64_t D, float* out, int64_t t0, int64_t d0) {
  constexpr int R = 6;
  __m256 a0[R], a1[R];
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
  const float* b = basis + d0;
  for (int64_t j = 0; j < k; ++j, p += R, b += D) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(p + r);
      a0[r] = _mm256_fmadd_ps(x, b0, a0[r]);
      a1[r] = _mm256_fmadd_ps(x, b1, a1[r]);
    }
  }
  const __m256 m0 = _mm256_loadu_ps(mean + d0);
  const __m256 m1 = _mm256_loadu_ps(mean + d0 + 8);
  for (int r = 0; r < R; ++r) {
    float* o = out + (t0 + r) * D + d0;
    _mm256_storeu_ps(o, _mm256_add_ps(m0, a0[r]));
    _mm256_storeu_ps(o + 8, _mm256_add_ps(m1, a1[r]));
  }
}

// The same for 8 columns.
template <int R>
inline void block8(const float* lat, int64_t k, int64_t n, const float* basis, const float* mean,
                   int64_t D, float* out, int64_t t0, int64_t d0) {
  __m256 a0[R];
  for (int r = 0; r < R; ++r) a0[r] = _mm256_setzero_ps();
  const float* l = lat + t0;
  const float* b = basis + d0;
  for (int64_t j = 0; j < k; ++j, l += n, b += D) {
    const __m256 b0 = _mm256_loadu_ps(b);
    for (int r = 0; r < R; ++r) a0[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(l + r), b0, a0[r]);
  }
  const __m256 m0 = _mm256_loadu_ps(mean + d0);
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + (t0 + r) * D + d0, _mm256_add_ps(m0, a0[r]));
}

// Runs `kernel<R>` over rows [0, n) in blocks of 6, the remainder with one smaller block.
template <typename K6, typename K5, typename K4, typename K3, typename K2, typename K1>
inline void over_rows(int64_t n, K6 k6, K5 k5, K4 k4, K3 k3, K2 k2, K1 k1) {
  int64_t t = 0;
  for (; t + 6 <= n; t += 6) k6(t);
  switch (n - t) {
    case 5:
      k5(t);
      break;
    case 4:
      k4(t);
      break;
    case 3:
      k3(t);
      break;
    case 2:
      k2(t);
      break;
    case 1:
      k1(t);
      break;
    default:
      break;
  }
}

}  // namespace

void unproject_rows(const float* lat, int64_t k, int64_t n, const float* basis, const float* mean,
                    int64_t D, float* out) {
  int64_t d0 = 0;
  // The full 6-row blocks' latents, packed block by block ([block][j][6]) so that each block's
  // broadcasts read one contiguous run instead of k strided cache lines.
  const int64_t blocks = n / 6;
  thread_local std::vector<float> packed;
  packed.resize(static_cast<size_t>(blocks * k * 6));
  for (int64_t j = 0; j < k; ++j)
    for (int64_t bl = 0; bl < blocks; ++bl)
      for (int r = 0; r < 6; ++r)
        packed[static_cast<size_t>((bl * k + j) * 6 + r)] = lat[j * n + bl * 6 + r];
  for (; d0 + 16 <= D; d0 += 16) {
    for (int64_t bl = 0; bl < blocks; ++bl)
      block16_packed(packed.data() + bl * k * 6, k, basis, mean, D, out, bl * 6, d0);
    const int64_t t = blocks * 6;
    switch (n - t) {
      case 5:
        block16<5>(lat, k, n, basis, mean, D, out, t, d0);
        break;
      case 4:
        block16<4>(lat, k, n, basis, mean, D, out, t, d0);
        break;
      case 3:
        block16<3>(lat, k, n, basis, mean, D, out, t, d0);
        break;
      case 2:
        block16<2>(lat, k, n, basis, mean, D, out, t, d0);
        break;
      case 1:
        block16<1>(lat, k, n, basis, mean, D, out, t, d0);
        break;
      default:
        break;
    }
  }
  // Column panels outermost: a 16-column panel of the basis (k x 64 bytes) stays in L1 while
  // every row block of the chunk streams past it.
  for (; d0 + 16 <= D; d0 += 16) {
    auto at = [&](auto r) {
      return [&, r](int64_t t0) {
        block16<decltype(r)::value>(lat, k, n, basis, mean, D, out, t0, d0);
      };
    };
    over_rows(n, at(std::integral_constant<int, 6>{}), at(std::integral_constant<int, 5>{}),
              at(std::integral_constant<int, 4>{}), at(std::integral_constant<int, 3>{}),
              at(std::integral_constant<int, 2>{}), at(std::integral_constant<int, 1>{}));
  }
  for (; d0 + 8 <= D; d0 += 8) {
    auto at = [&](auto r) {
      return [&, r](int64_t t0) {
        block8<decltype(r)::value>(lat, k, n, basis, mean, D, out, t0, d0);
      };
    };
    over_rows(n, at(std::integral_constant<int, 6>{}), at(std::integral_constant<int, 5>{}),
              at(std::integral_constant<int, 4>{}), at(std::integral_constant<int, 3>{}),
              at(std::integral_constant<int, 2>{}), at(std::integral_constant<int, 1>{}));
  }
  // Last D % 8 columns: the scalar loop (same order, same fused multiply-add).
  for (int64_t t = 0; t < n && d0 < D; ++t)
    for (int64_t d = d0; d < D; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) acc = madd(lat[j * n + t], basis[j * D + d], acc);
      out[t * D + d] = mean[d] + acc;
    }
}

#else

void unproject_rows(const float* lat, int64_t k, int64_t n, const float* basis, const float* mean,
                    int64_t D, float* out) {
  unproject_rows_ref(lat, k, n, basis, mean, D, out);
}

#endif

}  // namespace vq::coding

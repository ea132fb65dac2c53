// argmin_in_window: the lowest key among the slots in a position window (see argmin.hpp).
#include "eviction/argmin.hpp"

#include <limits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace vq::eviction {

int64_t argmin_in_window_reference(const double* num, const double* den, const int64_t* pos,
                                   int64_t n, int64_t lo, int64_t hi) {
  int64_t best = -1, best_pos = 0;
  double best_v = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = pos[i];
    if (p < lo || p >= hi) continue;
    const double v = den ? num[i] / den[i] : num[i];
    if (best < 0 || v < best_v || (v == best_v && p < best_pos)) {
      best = i;
      best_v = v;
      best_pos = p;
    }
  }
  return best;
}

int64_t argmin_in_window(const double* num, const double* den, const int64_t* pos, int64_t n,
                         int64_t lo, int64_t hi) {
#if defined(__AVX512F__)
  // Pass 1: the smallest key in the window (lanes outside it keep +inf), whether any slot is in
  // it, and whether any key there is NaN. A division is correctly rounded in a vector lane as in
  // a scalar one, so the keys are the reference's bit for bit.
  const __m512i vlo = _mm512_set1_epi64(lo), vhi = _mm512_set1_epi64(hi);
  // (the division only in the window's lanes: no floating-point flag from a slot outside it)
  const auto key8 = [&](int64_t i, __mmask8 ok) {
    const __m512d v = _mm512_loadu_pd(num + i);
    return den ? _mm512_maskz_div_pd(ok, v, _mm512_loadu_pd(den + i)) : v;
  };
  const auto in8 = [&](int64_t i) -> __mmask8 {
    const __m512i p = _mm512_loadu_si512(pos + i);
    return _mm512_cmpge_epi64_mask(p, vlo) & _mm512_cmplt_epi64_mask(p, vhi);
  };
  const double inf = std::numeric_limits<double>::infinity();
  __m512d mv = _mm512_set1_pd(inf);
  __mmask8 any = 0, nan = 0;
  const int64_t whole = n / 8 * 8;
  for (int64_t i = 0; i < whole; i += 8) {
    const __mmask8 ok = in8(i);
    const __m512d v = key8(i, ok);
    any |= ok;
    nan |= _mm512_mask_cmp_pd_mask(ok, v, v, _CMP_UNORD_Q);
    mv = _mm512_mask_min_pd(mv, ok, mv, v);
  }
  double m = _mm512_reduce_min_pd(mv);
  bool tail_any = false, tail_nan = false;
  for (int64_t i = whole; i < n; ++i) {
    if (pos[i] < lo || pos[i] >= hi) continue;
    const double v = den ? num[i] / den[i] : num[i];
    tail_any = true;
    tail_nan = tail_nan || v != v;
    m = v < m ? v : m;
  }
  if (nan != 0 || tail_nan) return argmin_in_window_reference(num, den, pos, n, lo, hi);
  if (any == 0 && !tail_any) return -1;
  // Pass 2: the lowest position among the slots in the window whose key is m (usually one).
  const __m512d vm = _mm512_set1_pd(m);
  int64_t best = -1, best_pos = 0;
  for (int64_t i = 0; i < whole; i += 8) {
    const __mmask8 ok = in8(i);
    unsigned hit = _mm512_mask_cmp_pd_mask(ok, key8(i, ok), vm, _CMP_EQ_OQ);
    for (; hit != 0; hit &= hit - 1) {
      const int64_t j = i + __builtin_ctz(hit);
      if (best < 0 || pos[j] < best_pos) {
        best = j;
        best_pos = pos[j];
      }
    }
  }
  for (int64_t i = whole; i < n; ++i) {
    if (pos[i] < lo || pos[i] >= hi) continue;
    const double v = den ? num[i] / den[i] : num[i];
    if (v == m && (best < 0 || pos[i] < best_pos)) {
      best = i;
      best_pos = pos[i];
    }
  }
  return best;
#else
  return argmin_in_window_reference(num, den, pos, n, lo, hi);
#endif
}

}  // namespace vq::eviction

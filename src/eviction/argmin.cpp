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
  // Groups of eight slots; the last one partial, its missing lanes masked off (masked loads read
  // nothing there). A lane counts when its slot exists and its position lies in [lo, hi).
  const __m512i vlo = _mm512_set1_epi64(lo), vhi = _mm512_set1_epi64(hi);
  const auto in8 = [&](int64_t i) -> __mmask8 {
    const __mmask8 live = n - i >= 8 ? 0xff : static_cast<__mmask8>((1u << (n - i)) - 1);
    const __m512i p = _mm512_maskz_loadu_epi64(live, pos + i);
    return live & _mm512_cmpge_epi64_mask(p, vlo) & _mm512_cmplt_epi64_mask(p, vhi);
  };
  // The keys of the counted lanes (the division only there: no floating-point flag from a slot
  // outside the window). A division is correctly rounded in a vector lane as in a scalar one, so
  // the keys are the reference's bit for bit.
  const auto key8 = [&](int64_t i, __mmask8 ok) {
    const __m512d v = _mm512_maskz_loadu_pd(ok, num + i);
    return den ? _mm512_maskz_div_pd(ok, v, _mm512_maskz_loadu_pd(ok, den + i)) : v;
  };
  // Pass 1: the smallest key in the window (lanes outside it keep +inf), whether any slot is in
  // it, and whether any key there is NaN.
  __m512d mv = _mm512_set1_pd(std::numeric_limits<double>::infinity());
  __mmask8 any = 0, nan = 0;
  for (int64_t i = 0; i < n; i += 8) {
    const __mmask8 ok = in8(i);
    const __m512d v = key8(i, ok);
    any |= ok;
    nan |= _mm512_mask_cmp_pd_mask(ok, v, v, _CMP_UNORD_Q);
    mv = _mm512_mask_min_pd(mv, ok, mv, v);
  }
  if (nan != 0) return argmin_in_window_reference(num, den, pos, n, lo, hi);
  if (any == 0) return -1;
  // Pass 2: the lowest position among the slots in the window whose key is the minimum (usually
  // one), in slot order.
  const __m512d vm = _mm512_set1_pd(_mm512_reduce_min_pd(mv));
  int64_t best = -1, best_pos = 0;
  for (int64_t i = 0; i < n; i += 8) {
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
  return best;
#else
  return argmin_in_window_reference(num, den, pos, n, lo, hi);
#endif
}

}  // namespace vq::eviction

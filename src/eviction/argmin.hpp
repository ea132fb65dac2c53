// The eviction step's choice: the evictable slot with the lowest key.
#pragma once

#include <cstdint>

namespace vq::eviction {

/// The slot i in [0, n) with the lowest key among those whose position pos[i] lies in [lo, hi),
/// ties going to the lowest position; -1 when no slot is in the window. The key is num[i], or
/// num[i] / den[i] when den is not null. Two passes over groups of eight (the last one masked)
/// where AVX-512 is there (the smallest key, then the lowest position holding it), the same slot as
/// argmin_in_window_reference's single ordered pass, which also takes any window holding a NaN
/// key (NaN has no order; the ordered pass keeps its historical answer).
int64_t argmin_in_window(const double* num, const double* den, const int64_t* pos, int64_t n,
                         int64_t lo, int64_t hi);

/// The definition: one pass in slot order, keeping the first slot whose key is below the best
/// so far or equal to it at a lower position.
int64_t argmin_in_window_reference(const double* num, const double* den, const int64_t* pos,
                                   int64_t n, int64_t lo, int64_t hi);

}  // namespace vq::eviction

// A run-time count turned into a compile-time one, for kernels templated on how many registers
// (queries, 16-value groups) they hold.
#pragma once

#include <cstdint>
#include <type_traits>

namespace vq {

/// f(std::integral_constant<int, c>{}) for c = count clamped to [1, Max].
template <int Max, typename F>
void with_static_count(int64_t count, F&& f) {
  static_assert(Max >= 1, "at least one");
  if constexpr (Max == 1) {
    f(std::integral_constant<int, 1>{});
  } else {
    if (count >= Max)
      f(std::integral_constant<int, Max>{});
    else
      with_static_count<Max - 1>(count, f);
  }
}

}  // namespace vq

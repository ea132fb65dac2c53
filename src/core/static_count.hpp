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

/// f(std::integral_constant<int, D>{}) for the head dims models use (64, 128), so that a kernel
/// templated on it unrolls its loops over a row; f(std::integral_constant<int, 0>{}) for any other
/// D (the kernel reads D at run time).
template <typename F>
void with_head_dim(int64_t D, F&& f) {
  if (D == 64) return f(std::integral_constant<int, 64>{});
  if (D == 128) return f(std::integral_constant<int, 128>{});
  f(std::integral_constant<int, 0>{});
}

}  // namespace vq

// How the store's and the policies' per-token buffers grow and shrink, and what they count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace vq::store {

/// Allocated bytes of a buffer (capacity, not size): what accounting reports.
template <typename T>
int64_t cap_bytes(const std::vector<T>& v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}

/// Resize to n elements, growing capacity by half (amortized O(1) appends, spare <= 1/3).
template <typename T>
void grow_to(std::vector<T>& v, size_t n) {
  if (n > v.capacity()) v.reserve(std::max(n, v.capacity() + v.capacity() / 2 + 8));
  v.resize(n);
}

/// Release capacity once less than half of it is used (memory follows the rows held).
template <typename T>
void maybe_shrink(std::vector<T>& v) {
  if (v.capacity() > 64 && v.size() < v.capacity() / 2) v.shrink_to_fit();
}

}  // namespace vq::store

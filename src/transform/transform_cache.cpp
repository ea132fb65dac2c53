#include "transform/transform_cache.hpp"

namespace vq::transform {

std::vector<int64_t> even_chunks(int64_t n, int64_t chunk) {
  std::vector<int64_t> sizes;
  if (n <= 0) return sizes;
  const int64_t count = (n + chunk - 1) / chunk;
  const int64_t base = n / count, extra = n % count;
  for (int64_t i = 0; i < count; ++i) sizes.push_back(base + (i < extra ? 1 : 0));
  return sizes;
}

}  // namespace vq::transform

#include "coding/checksum.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace vq::coding {

uint64_t xxh64(const void* data, size_t size) {
  return XXH64(data, size, 0);
}

}  // namespace vq::coding

// allocate_large and resident_huge_bytes (see large_buffer.hpp).
#include "core/large_buffer.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace vq {

bool huge_pages_enabled() {
  const char* v = std::getenv("VQ_HUGE_PAGES");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

LargeBuffer allocate_large(size_t bytes, bool huge_pages) {
  LargeBuffer out;
  out.bytes = bytes;
  if (bytes == 0) return out;
  const bool big = huge_pages && bytes >= kHugePageBytes && huge_pages_enabled();
  const size_t align = big ? kHugePageBytes : size_t{64};
  // Whole alignment units: the advice below then covers only memory this buffer owns.
  if (bytes > SIZE_MAX - align) throw std::bad_alloc();
  out.allocated = (bytes + align - 1) / align * align;
  const std::align_val_t al{align};
  out.data = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(::operator new(out.allocated, al)),
                                      [al](uint8_t* p) { ::operator delete(p, al); });
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (big) out.huge_pages_advised = ::madvise(out.data.get(), out.allocated, MADV_HUGEPAGE) == 0;
#endif
  return out;
}

int64_t resident_huge_bytes() {
#if defined(__linux__)
  std::FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (!f) return -1;
  char line[256];
  int64_t kb = -1;
  while (std::fgets(line, sizeof line, f)) {
    long long v = 0;
    if (std::strncmp(line, "AnonHugePages:", 14) == 0 && std::sscanf(line + 14, "%lld", &v) == 1) {
      kb = v;
      break;
    }
  }
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
#else
  return -1;
#endif
}

}  // namespace vq

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

namespace {

// `n` bytes (a multiple of 64) from the heap, 64-byte aligned.
std::shared_ptr<uint8_t> heap_bytes(size_t n) {
  constexpr std::align_val_t kAl{64};
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(::operator new(n, kAl)),
                                  [](uint8_t* p) { ::operator delete(p, kAl); });
}

}  // namespace

#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
constexpr bool kCanAdvise = true;
#else
constexpr bool kCanAdvise = false;
#endif

LargeBuffer allocate_large(size_t bytes, bool huge_pages) {
  LargeBuffer out;
  out.bytes = bytes;
  if (bytes == 0) return out;
  const bool big = kCanAdvise && bytes >= kHugePageBytes;
  const size_t align = big ? kHugePageBytes : size_t{64};
  // Whole alignment units: the advice below then covers only memory this buffer owns.
  if (bytes > SIZE_MAX - 2 * kHugePageBytes) throw std::bad_alloc();
  out.allocated = (bytes + align - 1) / align * align;
#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
  if (big) {
    // A mapping of its own, so that the advice ends with the buffer (advice given to heap
    // memory would stay on it after a free, for whatever the heap puts there next): one
    // alignment unit more than needed, the unaligned ends given back at once.
    const size_t span = out.allocated + kHugePageBytes;
    void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const auto base = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t start = (base + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    if (start > base) ::munmap(raw, start - base);
    const uintptr_t end = start + out.allocated;
    if (base + span > end) ::munmap(reinterpret_cast<void*>(end), base + span - end);
    auto* p = reinterpret_cast<uint8_t*>(start);
    const size_t n = out.allocated;
    // (should the control block's allocation throw, the shared_ptr unmaps p itself)
    out.data = std::shared_ptr<uint8_t>(p, [n](uint8_t* q) { ::munmap(q, n); });
    // With the switch off, ask for small pages even where the kernel's setting is `always`.
    const bool want = huge_pages && huge_pages_enabled();
    const int r = ::madvise(p, n, want ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    out.huge_pages_advised = want && r == 0;
    return out;
  }
#endif
  out.data = heap_bytes(out.allocated);
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

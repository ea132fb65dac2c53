// Memory for large arrays that are streamed whole again and again: a model's weights, which a
// decode step reads from end to end once per token, and the bandwidth probes that measure the
// machine against them.
//
// With 4 KiB pages, a sweep over a gigabyte touches a quarter of a million pages, far more than
// the TLB maps, so every new page costs a page walk; in a virtual machine each walk is itself
// two-dimensional. Mapping the array with 2 MiB pages removes nearly all of them. On the 2-core
// VM these numbers come from (results/session31/huge_pages/runs.txt; docs/eval.md): a two-thread
// read of 1 GiB went from 50.8-54.4 to 57.8-60.9 GB/s, and two copies of one 1B-shaped Q8_0 model
// in one process, taking turns, decoded 1.01-1.24x faster on huge pages.
//
// On Linux, an array of at least kHugePageBytes gets a mapping of its own, on a 2 MiB boundary
// and a whole number of 2 MiB pages long, advised with madvise(MADV_HUGEPAGE): the kernel backs
// it with transparent huge pages when its setting is `always` or `madvise` and it has free 2 MiB
// frames. With huge pages not wanted (the argument, or VQ_HUGE_PAGES=0) the mapping is advised
// MADV_NOHUGEPAGE instead, so that it gets small pages even under `always`. Smaller arrays, and
// every array on other systems, come from the heap, 64-byte aligned. The advice changes where
// bytes live, never their values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace vq {

/// The huge-page size the advice asks for, and (Linux) the alignment of arrays at least that large.
constexpr size_t kHugePageBytes = size_t{1} << 21;

struct LargeBuffer {
  std::shared_ptr<uint8_t> data;  ///< contents unspecified; nullptr only when bytes == 0
  size_t bytes = 0;               ///< what was asked for
  size_t allocated = 0;           ///< what was allocated: bytes rounded up to the alignment
  /// True when the kernel accepted the huge-page advice (it may still fall back to small pages
  /// when no 2 MiB frame is free; resident_huge_bytes() says what it did).
  bool huge_pages_advised = false;
};

/// False when the environment variable VQ_HUGE_PAGES is "0" (read at every call): large arrays
/// are then advised for ordinary pages, e.g. to compare the two in one process, or where the
/// kernel's compaction for huge pages stalls a machine short of memory.
bool huge_pages_enabled();

/// `bytes` of memory with unspecified contents, laid out as the file comment says: 2 MiB aligned
/// (Linux, bytes >= kHugePageBytes; advised for huge pages when `huge_pages` and
/// huge_pages_enabled()) or 64-byte aligned. Throws std::bad_alloc when the system refuses the
/// memory or bytes is within 4 MiB of SIZE_MAX (it could not be rounded up).
LargeBuffer allocate_large(size_t bytes, bool huge_pages = true);

/// Bytes of this process's anonymous memory backed by huge pages now (Linux's AnonHugePages in
/// /proc/self/smaps_rollup), or -1 where the system does not say.
int64_t resident_huge_bytes();

}  // namespace vq

// Memory for large arrays that are streamed whole again and again: a model's weights, which a
// decode step reads from end to end once per token, and the bandwidth probes that measure the
// machine against them.
//
// With 4 KiB pages, a sweep over a gigabyte touches a quarter of a million pages, far more than
// the TLB maps, so every new page costs a page walk; in a virtual machine each walk is itself
// two-dimensional. Mapping the array with 2 MiB pages removes nearly all of them: on the 2-core
// VM these numbers come from, a two-thread read of 1 GiB went from 51-53 to 58-61 GB/s and Q8_0
// decode of a 1B-shaped model from 39-42 to 48-49 tok/s (docs/eval.md).
//
// On Linux, arrays of at least kHugePageBytes are placed on a 2 MiB boundary, sized to a whole
// number of 2 MiB pages, and advised with madvise(MADV_HUGEPAGE): the kernel then backs them with
// transparent huge pages when its setting is `always` or `madvise` and it has free 2 MiB frames.
// Elsewhere, or for smaller arrays, this is an ordinary 64-byte-aligned allocation. The advice
// changes where bytes live, never their values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace vq {

/// The huge-page size the advice asks for, and the alignment of arrays at least that large.
constexpr size_t kHugePageBytes = size_t{1} << 21;

struct LargeBuffer {
  std::shared_ptr<uint8_t> data;  ///< uninitialized; nullptr only when bytes == 0
  size_t bytes = 0;               ///< what was asked for
  size_t allocated = 0;           ///< what was allocated: bytes rounded up to the alignment
  /// True when the kernel accepted the huge-page advice (it may still fall back to small pages
  /// when no 2 MiB frame is free; resident_huge_bytes() says what it did).
  bool huge_pages_advised = false;
};

/// False when the environment variable VQ_HUGE_PAGES is "0" (read at every call): arrays then
/// get ordinary pages, e.g. to compare the two in one process or where the kernel's compaction
/// for huge pages stalls a machine short of memory.
bool huge_pages_enabled();

/// `bytes` of uninitialized memory, 64-byte aligned, or 2 MiB aligned and advised for huge pages
/// when bytes >= kHugePageBytes, `huge_pages` and huge_pages_enabled() (see the file comment).
/// Throws std::bad_alloc when the system refuses the memory.
LargeBuffer allocate_large(size_t bytes, bool huge_pages = true);

/// Bytes of this process's anonymous memory backed by huge pages now (Linux's AnonHugePages in
/// /proc/self/smaps_rollup), or -1 where the system does not say.
int64_t resident_huge_bytes();

}  // namespace vq

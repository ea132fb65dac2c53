// `veloxquant bench memory`: what each method's cache holds, three ways, on the same tokens:
//   reported  the cache's stats().kept_bytes (counted from its buffers' capacities);
//   counted   the live heap bytes (glibc mallinfo2) that destroying the built and fed cache
//             frees: what the cache held;
//   scratch   the heap growth that outlives the cache: the threads' working buffers that every
//             cache of a method shares (eviction::Scratch, kernel blocks), not the cache's;
//   rss       the growth of the process's peak resident set (VmHWM), each method in its own
//             forked process so that one method's peak never hides another's;
// next to the fp16 size of every token (the `full` baseline). Synthetic K/V/Q, no model needed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace vq::bench {

struct MemoryRow {
  std::string spec;
  int64_t tokens_kept = 0;  ///< per head at the end
  double reported = 0;      ///< kept_bytes
  double counted = 0;       ///< live heap bytes freed when the cache is destroyed
  double scratch = 0;       ///< live heap growth left after it (per-thread working buffers)
  double rss = 0;           ///< peak RSS growth
  double fp16_bytes = 0;    ///< every token at fp16 (K + V)
  double content = 0, params = 0, policy = 0, index = 0, overhead = 0, stored = 0;
  double seconds = 0;
  std::string error;  ///< set when the method failed (the row has no numbers then)
};

struct MemoryOptions {
  int64_t heads = 8, tokens = 32768, dim = 128, query_heads = 32, update = 512;
  std::vector<std::string> specs;  ///< empty: default_memory_specs(budget)
  int64_t budget = 4096;
  std::function<void(const std::string&)> progress;
};

/// Every registered method (eviction methods at `budget`) plus policy+codec compositions.
std::vector<std::string> default_memory_specs(int64_t budget);

std::vector<MemoryRow> run_memory_bench(const MemoryOptions& opt);

}  // namespace vq::bench

// The process-wide thread count of VeloxQuant's parallel loops (weight matrix products split by
// output rows, attention by query heads, a cache update and a block codec by KV heads, an
// evaluation by windows). Work is cut into pieces that depend only on the problem's shape, never
// on the thread count (evaluation windows are spread over the threads, but each window's result
// is computed alone and the sums are taken in window order), so every result is bit-identical
// whatever the count; the threads only decide who computes which piece.
#pragma once

namespace vq {

/// Largest accepted thread count.
constexpr int kMaxThreads = 1024;

/// std::thread::hardware_concurrency(), clamped to [1, kMaxThreads] (1 when unknown).
int default_thread_count();
/// Threads the parallel loops use now (the caller plus count - 1 workers). Default:
/// default_thread_count().
int thread_count();
/// Use `n` threads from now on (1 = everything on the calling thread). InvalidArgument naming n
/// when it is outside [1, kMaxThreads]. Waits for a running parallel loop to finish first.
void set_thread_count(int n);

}  // namespace vq

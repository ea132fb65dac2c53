// A persistent pool of threads for data-parallel loops with fixed partitions.
//
// parallel_for(n, grain, fn) cuts [0, n) into the pieces [k * grain, min(n, (k + 1) * grain))
// and calls fn(begin, end) once per piece. The pieces depend only on n and grain, never on the
// number of threads or on timing, so as long as fn computes each output element from its piece
// alone, the result is bit-identical for any thread count; only which thread runs a piece
// depends on timing.
//
//   - The calling thread works too: a pool of N threads has N - 1 workers.
//   - The pieces are dealt in N contiguous regions, one per thread: each thread runs its own
//     region's pieces front to back, then helps with the others'. A thread's work is then one
//     run of consecutive pieces (one stream through memory for a weight product) rather than
//     every N-th piece, while a late or slow thread's share is still taken over.
//   - A parallel_for issued from inside a piece (nested), or while another thread is running a
//     loop on the same pool, runs its pieces in order on the calling thread (same pieces).
//   - An exception thrown by a piece is caught and rethrown on the caller once every claimed
//     piece has finished; after a failure, pieces above the lowest failing one are skipped
//     and those below it still run. When several pieces throw, the one with the lowest index
//     wins, so the error is the same whatever the thread count.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace vq {

/// A non-owning reference to a callable fn(int64_t begin, int64_t end) (no allocation, unlike
/// std::function: a decode step issues several loops). The callable must outlive the call.
class PieceFn {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, PieceFn>>>
  PieceFn(F&& f)  // NOLINT(google-explicit-constructor): passed as a lambda
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, int64_t b, int64_t e) {
          (*static_cast<std::remove_reference_t<F>*>(o))(b, e);
        }) {}
  void operator()(int64_t begin, int64_t end) const { call_(obj_, begin, end); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t);
};

class ThreadPool {
 public:
  using Body = PieceFn;

  /// `threads` in [1, kMaxThreads] (InvalidArgument otherwise).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  /// Stop the workers and start threads - 1 new ones (waits for a running loop). Refused
  /// (InvalidArgument) from inside a piece of a loop.
  void resize(int threads);
  /// See the file comment. n >= 0 and grain >= 1 (InvalidArgument otherwise).
  void parallel_for(int64_t n, int64_t grain, Body fn);

  /// True on a thread that is running a piece of some pool's loop.
  static bool in_parallel_region();

 private:
  void start(int threads);
  void stop();
  void worker_loop(uint64_t seen, int slot);
  /// Claims and runs pieces until none is left; slot: 0 the caller, i worker i.
  void run_pieces(int slot);

  std::mutex job_mutex_;  // one loop at a time
  std::mutex m_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  bool stopping_ = false;

  // The loop in flight (written before generation_ is bumped).
  const Body* fn_ = nullptr;  // the caller's, valid while the loop runs
  int64_t n_ = 0, grain_ = 1;
  // The pieces in threads() contiguous regions, one per thread slot: next is the region's next
  // unclaimed piece, end one past its last.
  struct alignas(64) Region {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  std::unique_ptr<Region[]> regions_;
  bool open_ = false;                   // under m_: workers may still join the loop in flight
  std::atomic<int> active_{0};          // changed under m_: workers inside the loop in flight
  std::atomic<int64_t> error_low_{-1};  // lowest failing piece so far, -1: none
  std::mutex error_mutex_;
  std::exception_ptr error_;
  int64_t error_piece_ = -1;
};

/// Multiply-adds (about) that a piece of the weight kernels' and attention's loops holds at least
/// when there is enough work: 1 << 20 by default, roughly 0.1 ms of work, so that the tens of
/// microseconds a sleeping worker takes to wake (more on a busy machine) are paid back; with
/// 1 << 16 and 1 << 18, two threads were slower than one on prose1k decode on a shared 2-core
/// machine. It changes how work is cut, never a result (tests set it to 1 to get many pieces).
int64_t min_piece_macs();
/// InvalidArgument when macs < 1.
void set_min_piece_macs(int64_t macs);
/// Pieces of `grain` items for a loop whose items cost about `item_macs` each: enough items per
/// piece to reach min_piece_macs(), at least 1.
int64_t grain_for(int64_t item_macs);
/// The same with a piece's least work given (a loop that cuts finer or coarser than the pool).
int64_t grain_for(int64_t item_macs, int64_t min_macs);

/// The process-wide pool (sized by set_thread_count, see veloxquant/threads.hpp).
ThreadPool& global_pool();
/// global_pool().parallel_for(n, grain, fn).
void parallel_for(int64_t n, int64_t grain, PieceFn fn);

}  // namespace vq

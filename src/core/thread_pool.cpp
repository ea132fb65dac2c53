// The thread pool (see thread_pool.hpp) and the process-wide thread count (veloxquant/threads.hpp).
#include "core/thread_pool.hpp"

#include <algorithm>
#include <memory>
#include <system_error>

#include "veloxquant/errors.hpp"
#include "veloxquant/threads.hpp"

namespace vq {

namespace {

thread_local bool t_in_region = false;

// Rounds a waiting thread spins (checking an atomic) before it sleeps on a condition variable:
// a decode step issues a loop every few microseconds, and waking a sleeping thread costs about
// as much as a small loop. A few tens of microseconds.
constexpr int kSpinRounds = 1000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

void check_threads(int threads) {
  VQ_CHECK(threads >= 1 && threads <= kMaxThreads, InvalidArgument, "threads = ", threads,
           " is outside [1, ", kMaxThreads, "]");
}

// Marks the current thread as inside a loop for the lifetime of the object.
struct RegionGuard {
  bool prev = t_in_region;
  RegionGuard() { t_in_region = true; }
  ~RegionGuard() { t_in_region = prev; }
};

void run_inline(int64_t n, int64_t grain, const PieceFn& fn) {
  RegionGuard guard;
  for (int64_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain));
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  check_threads(threads);
  start(threads);
}

ThreadPool::~ThreadPool() {
  std::lock_guard<std::mutex> job(job_mutex_);
  stop();
}

bool ThreadPool::in_parallel_region() {
  return t_in_region;
}

void ThreadPool::start(int threads) {
  stopping_ = false;
  workers_.reserve(static_cast<size_t>(threads - 1));
  // No loop is in flight here: a worker starts from the current generation.
  const uint64_t g = generation_.load(std::memory_order_acquire);
  regions_ = std::make_unique<Region[]>(static_cast<size_t>(threads));
  try {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, g, i] { worker_loop(g, i); });
  } catch (const std::system_error& e) {
    // The system refused a thread (its limit on threads or on memory for their stacks): stop the
    // ones started, stay usable on the calling thread alone, and say which count failed.
    const auto started = static_cast<int>(workers_.size()) + 1;
    stop();
    stopping_ = false;
    regions_ = std::make_unique<Region[]>(1);
    VQ_THROW(InvalidArgument, "cannot run ", threads, " threads: the system refused thread ",
             started + 1, " (", e.what(), "); use fewer (the pool now runs on 1 thread)");
  }
}

void ThreadPool::stop() {
  {
    std::lock_guard<std::mutex> lk(m_);
    stopping_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::resize(int threads) {
  check_threads(threads);
  VQ_CHECK(!t_in_region, InvalidArgument,
           "the thread count cannot change from inside a parallel loop (threads = ", threads, ")");
  std::lock_guard<std::mutex> job(job_mutex_);
  if (threads == this->threads()) return;
  stop();
  start(threads);
}

void ThreadPool::run_pieces(int slot) {
  RegionGuard guard;
  // This thread's own region first, from its front, then the others' in turn (helping the
  // threads that are late or slow): a thread's pieces follow one another in memory for as
  // long as its region lasts.
  const int R = threads();
  for (int i = 0; i < R; ++i) {
    Region& reg = regions_[static_cast<size_t>((slot + i) % R)];
    for (;;) {
      const int64_t k = reg.next.fetch_add(1, std::memory_order_relaxed);
      if (k >= reg.end) break;
      // After a failure only the pieces below the lowest failing one so far still run: every
      // one of them is run, whatever order the regions are claimed in, so the error that
      // reaches the caller is the lowest failing piece's.
      const int64_t low = error_low_.load(std::memory_order_acquire);
      if (low >= 0 && k > low) continue;
      const int64_t b = k * grain_;
      try {
        (*fn_)(b, std::min(n_, b + grain_));
      } catch (...) {
        std::lock_guard<std::mutex> lk(error_mutex_);
        if (error_piece_ < 0 || k < error_piece_) {
          error_piece_ = k;
          error_ = std::current_exception();
          error_low_.store(k, std::memory_order_release);
        }
      }
    }
  }
}

void ThreadPool::worker_loop(uint64_t seen, int slot) {
  for (;;) {
    for (int i = 0; i < kSpinRounds && generation_.load(std::memory_order_acquire) == seen; ++i)
      cpu_relax();
    {
      std::unique_lock<std::mutex> lk(m_);
      wake_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      seen = generation_.load(std::memory_order_acquire);
      if (stopping_) return;
      // A worker that wakes after the caller has finished the loop stays out of it: the caller
      // never waits for a thread that was not scheduled in time.
      if (!open_) continue;
      active_.fetch_add(1, std::memory_order_relaxed);
    }
    run_pieces(slot);
    std::lock_guard<std::mutex> lk(m_);
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, Body fn) {
  VQ_CHECK(n >= 0, InvalidArgument, "parallel_for: n = ", n, " < 0");
  VQ_CHECK(grain >= 1, InvalidArgument, "parallel_for: grain = ", grain, " < 1");
  if (n == 0) return;
  const int64_t pieces = (n - 1) / grain + 1;
  if (pieces == 1 || workers_.empty() || t_in_region) return run_inline(n, grain, fn);
  std::unique_lock<std::mutex> job(job_mutex_, std::try_to_lock);
  if (!job.owns_lock()) return run_inline(n, grain, fn);  // another thread's loop is running
  fn_ = &fn;
  n_ = n;
  grain_ = grain;
  // Region r: pieces [r P / R, (r + 1) P / R), thread slot r's to start on.
  const int R = threads();
  for (int r = 0; r < R; ++r) {
    regions_[static_cast<size_t>(r)].next.store(pieces * r / R, std::memory_order_relaxed);
    regions_[static_cast<size_t>(r)].end = pieces * (r + 1) / R;
  }
  error_low_.store(-1, std::memory_order_relaxed);
  error_ = nullptr;
  error_piece_ = -1;
  {
    std::lock_guard<std::mutex> lk(m_);
    open_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_pieces(0);
  // Every piece is claimed: close the loop to latecomers, then wait for the workers still in it.
  {
    std::lock_guard<std::mutex> lk(m_);
    open_ = false;
  }
  for (int i = 0; i < kSpinRounds && active_.load(std::memory_order_acquire) != 0; ++i) cpu_relax();
  if (active_.load(std::memory_order_acquire) != 0) {
    std::unique_lock<std::mutex> lk(m_);
    done_.wait(lk, [&] { return active_.load(std::memory_order_acquire) == 0; });
  }
  fn_ = nullptr;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

// ------------------------------------------------------------------------------------------------
// The process-wide pool

namespace {
std::atomic<int64_t> g_min_piece_macs{int64_t{1} << 20};
}  // namespace

int64_t min_piece_macs() {
  return g_min_piece_macs.load(std::memory_order_relaxed);
}

void set_min_piece_macs(int64_t macs) {
  VQ_CHECK(macs >= 1, InvalidArgument, "min_piece_macs = ", macs, " < 1");
  g_min_piece_macs.store(macs, std::memory_order_relaxed);
}

int64_t grain_for(int64_t item_macs, int64_t min_macs) {
  const int64_t per = std::max<int64_t>(1, item_macs);
  const int64_t want = std::max<int64_t>(1, min_macs);
  return std::max<int64_t>(1, want / per + (want % per != 0 ? 1 : 0));
}

int64_t grain_for(int64_t item_macs) {
  return grain_for(item_macs, min_piece_macs());
}

int default_thread_count() {
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(std::min<unsigned>(hw, kMaxThreads));
}

ThreadPool& global_pool() {
  static ThreadPool pool(default_thread_count());
  return pool;
}

int thread_count() {
  return global_pool().threads();
}

void set_thread_count(int n) {
  check_threads(n);
  global_pool().resize(n);
}

void parallel_for(int64_t n, int64_t grain, PieceFn fn) {
  global_pool().parallel_for(n, grain, fn);
}

}  // namespace vq

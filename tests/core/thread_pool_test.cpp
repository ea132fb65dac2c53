#include "core/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/rng.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/threads.hpp"

namespace {

// Per element an order-sensitive float computation that also depends on the piece it belongs
// to (a running sum from the piece's start), so a change of partition changes the bits.
std::vector<float> run(vq::ThreadPool& pool, int64_t n, int64_t grain) {
  vq::Rng rng(7);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = static_cast<float>(rng.normal());
  std::vector<float> y(static_cast<size_t>(n), std::nanf(""));
  pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
    float acc = 0.0f;
    for (int64_t i = b; i < e; ++i) {
      acc += x[static_cast<size_t>(i)] * 1.0001f;
      y[static_cast<size_t>(i)] = acc + std::sin(static_cast<float>(b));
    }
  });
  return y;
}

}  // namespace

TEST(ThreadPool, ResultsBitIdenticalForAnyThreadCount) {
  for (const auto& [n, grain] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {7, 3}, {1000, 17}, {4096, 64}, {100000, 333}}) {
    vq::ThreadPool one(1);
    const std::vector<float> ref = run(one, n, grain);
    for (float v : ref) ASSERT_FALSE(std::isnan(v)) << "an element was never written";
    for (int threads : {2, 3, 8}) {
      vq::ThreadPool pool(threads);
      EXPECT_EQ(pool.threads(), threads);
      for (int rep = 0; rep < 3; ++rep) {
        const std::vector<float> got = run(pool, n, grain);
        ASSERT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0)
            << "n " << n << " grain " << grain << " threads " << threads;
      }
    }
  }
}

TEST(ThreadPool, PiecesAreFixedAndCoverTheRangeOnce) {
  vq::ThreadPool pool(3);
  std::mutex m;
  std::set<std::pair<int64_t, int64_t>> seen;
  std::vector<std::atomic<int>> hits(1001);
  pool.parallel_for(1001, 100, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
    std::lock_guard<std::mutex> lk(m);
    seen.insert({b, e});
  });
  std::set<std::pair<int64_t, int64_t>> want;
  for (int64_t b = 0; b < 1001; b += 100) want.insert({b, std::min<int64_t>(b + 100, 1001)});
  EXPECT_EQ(seen, want);
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, UsesSeveralThreadsWhenThereArePieces) {
  vq::ThreadPool pool(2);
  std::mutex m;
  std::set<std::thread::id> ids;
  // Pieces long enough (a few ms) that the worker wakes before the caller has taken them all.
  pool.parallel_for(16, 1, [&](int64_t, int64_t) {
    {
      std::lock_guard<std::mutex> lk(m);
      ids.insert(std::this_thread::get_id());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  EXPECT_EQ(ids.size(), 2u);
}

TEST(ThreadPool, EachThreadStartsOnItsOwnRegionOfConsecutivePieces) {
  vq::ThreadPool pool(2);
  std::mutex m;
  std::vector<std::pair<std::thread::id, int64_t>> order;  // (thread, piece) as they start
  const std::thread::id caller = std::this_thread::get_id();
  // 16 pieces of a few ms: region 0 is pieces 0-7 (the caller's), region 1 pieces 8-15.
  pool.parallel_for(16, 1, [&](int64_t b, int64_t) {
    {
      std::lock_guard<std::mutex> lk(m);
      order.emplace_back(std::this_thread::get_id(), b);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(4));
  });
  ASSERT_EQ(order.size(), 16u);
  std::map<std::thread::id, std::vector<int64_t>> by;
  for (const auto& [id, b] : order) by[id].push_back(b);
  ASSERT_EQ(by.size(), 2u) << "the worker never ran a piece";
  for (const auto& [id, pieces] : by) {
    // A thread's first piece is its region's first, and it goes through its region front to
    // back (another thread may take some of its pieces when it is late, so gaps may appear).
    const int64_t lo = id == caller ? 0 : 8;
    EXPECT_EQ(pieces.front(), lo);
    for (size_t i = 1; i < pieces.size() && pieces[i] >= lo && pieces[i] < lo + 8; ++i)
      EXPECT_GT(pieces[i], pieces[i - 1]);
  }
}

TEST(ThreadPool, ZeroIterationsCallsNothing) {
  vq::ThreadPool pool(4);
  int calls = 0;
  pool.parallel_for(0, 8, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPool, BadArgumentsAreRefused) {
  vq::ThreadPool pool(2);
  const auto nop = [](int64_t, int64_t) {};
  EXPECT_THROW(pool.parallel_for(-1, 1, nop), vq::InvalidArgument);
  EXPECT_THROW(pool.parallel_for(10, 0, nop), vq::InvalidArgument);
  EXPECT_THROW(vq::ThreadPool(0), vq::InvalidArgument);
  EXPECT_THROW(vq::ThreadPool(vq::kMaxThreads + 1), vq::InvalidArgument);
  try {
    vq::set_thread_count(0);
    FAIL() << "set_thread_count(0) was accepted";
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("threads = 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1024"), std::string::npos) << e.what();
  }
}

TEST(ThreadPool, ExceptionsReachTheCallerLowestPieceFirst) {
  for (int threads : {1, 2, 3, 8}) {
    vq::ThreadPool pool(threads);
    try {
      pool.parallel_for(64, 1, [](int64_t b, int64_t) {
        if (b == 40 || b == 13 || b == 50) throw std::runtime_error("piece " + std::to_string(b));
      });
      FAIL() << "no exception with " << threads << " threads";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "piece 13") << threads << " threads";
    }
    // The pool still works after a failure.
    std::atomic<int64_t> sum{0};
    pool.parallel_for(100, 7, [&](int64_t b, int64_t e) { sum += e - b; });
    EXPECT_EQ(sum.load(), 100);
  }
}

TEST(ThreadPool, NestedLoopsRunInlineWithTheSamePieces) {
  vq::ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(20 * 30);
  std::atomic<int> nested_inline{0};
  pool.parallel_for(20, 1, [&](int64_t b, int64_t e) {
    EXPECT_TRUE(vq::ThreadPool::in_parallel_region());
    for (int64_t i = b; i < e; ++i)
      pool.parallel_for(30, 4, [&](int64_t b2, int64_t e2) {
        if (b2 == 0) nested_inline.fetch_add(1);
        EXPECT_EQ(b2 % 4, 0);
        EXPECT_EQ(e2, std::min<int64_t>(b2 + 4, 30));
        for (int64_t j = b2; j < e2; ++j) hits[static_cast<size_t>(i * 30 + j)].fetch_add(1);
      });
  });
  EXPECT_FALSE(vq::ThreadPool::in_parallel_region());
  EXPECT_EQ(nested_inline.load(), 20);
  // Resizing from inside a piece would wait for the loop it is part of: refused.
  EXPECT_THROW(pool.parallel_for(4, 1, [&](int64_t, int64_t) { pool.resize(2); }),
               vq::InvalidArgument);
  EXPECT_EQ(pool.threads(), 3);
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, TwoCallersOnOnePoolBothFinish) {
  vq::ThreadPool pool(2);
  const auto work = [&pool](std::vector<float>* out) {
    for (int rep = 0; rep < 50; ++rep) *out = run(pool, 5000, 37);
  };
  std::vector<float> a, b;
  std::thread t(work, &a);
  work(&b);
  t.join();
  vq::ThreadPool one(1);
  const std::vector<float> ref = run(one, 5000, 37);
  EXPECT_EQ(std::memcmp(a.data(), ref.data(), ref.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(b.data(), ref.data(), ref.size() * sizeof(float)), 0);
}

TEST(ThreadPool, ResizeAndGlobalCount) {
  vq::ThreadPool pool(1);
  pool.resize(4);
  EXPECT_EQ(pool.threads(), 4);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(1000, 10, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 1000);
  pool.resize(1);
  EXPECT_EQ(pool.threads(), 1);

  const int before = vq::thread_count();
  EXPECT_GE(vq::default_thread_count(), 1);
  vq::set_thread_count(3);
  EXPECT_EQ(vq::thread_count(), 3);
  vq::set_thread_count(before);
  EXPECT_EQ(vq::thread_count(), before);
}

// argmin_in_window (the eviction step's choice) against its one-pass definition.
#include "eviction/argmin.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/rng.hpp"

namespace {

using vq::eviction::argmin_in_window;
using vq::eviction::argmin_in_window_reference;

// Keys drawn from a handful of values (many ties, signed zeros, infinities), positions a shuffled
// range with gaps (slots are not in position order after evictions), windows of every kind.
TEST(EvictionArgmin, TheVectorPassesPickTheSlotOfTheOrderedPass) {
  vq::Rng rng(5);
  const double inf = std::numeric_limits<double>::infinity();
  const double values[] = {0.5, 0.25, 0.0, -0.0, 1.0, inf, 3.0, 0.125};
  int checked = 0, found = 0;
  for (int64_t n = 0; n <= 70; ++n) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<double> num(static_cast<size_t>(n)), den(static_cast<size_t>(n));
      std::vector<int64_t> pos(static_cast<size_t>(n));
      std::iota(pos.begin(), pos.end(), int64_t{0});
      for (int64_t i = n - 1; i > 0; --i)
        std::swap(pos[static_cast<size_t>(i)],
                  pos[static_cast<size_t>(rng.uniform(0.0, static_cast<double>(i + 1)))]);
      for (auto& p : pos) p = 3 * p + 1;  // gaps
      const int distinct = trial % 3 == 0 ? 2 : 8;
      for (int64_t i = 0; i < n; ++i) {
        num[static_cast<size_t>(i)] =
            trial % 4 == 3 ? rng.normal() : values[static_cast<int>(rng.uniform(0.0, distinct))];
        den[static_cast<size_t>(i)] =
            trial % 2 ? 1.0 + static_cast<int>(rng.uniform(0.0, 4.0)) : 1.0 + rng.uniform(0.0, 3.0);
      }
      const int64_t lo = trial % 5 == 0 ? 0 : static_cast<int64_t>(rng.uniform(0.0, 3.0 * n + 2));
      const int64_t hi = trial % 7 == 0 ? std::numeric_limits<int64_t>::max()
                                        : lo + static_cast<int64_t>(rng.uniform(0.0, 3.0 * n + 2));
      const double* dens[2] = {nullptr, den.data()};
      for (const double* d : dens) {
        const int64_t want = argmin_in_window_reference(num.data(), d, pos.data(), n, lo, hi);
        EXPECT_EQ(argmin_in_window(num.data(), d, pos.data(), n, lo, hi), want)
            << "n " << n << " trial " << trial << " den " << (d != nullptr);
        ++checked;
        found += want >= 0;
      }
    }
  }
  EXPECT_EQ(checked, 71 * 40 * 2);
  EXPECT_GT(found, checked / 2);
}

// A NaN key has no order: the window takes the ordered pass's answer, wherever the NaN lies
// (first in the window, later, in the tail after the last whole group), and a NaN outside the
// window changes nothing.
TEST(EvictionArgmin, NaNKeysGiveTheOrderedPassesAnswer) {
  const double nan = std::nan("");
  for (const int64_t n : {5, 8, 13, 24, 31}) {
    for (int64_t at = 0; at < n; ++at) {
      std::vector<double> num(static_cast<size_t>(n));
      std::vector<int64_t> pos(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        num[static_cast<size_t>(i)] = static_cast<double>((i * 7) % 5);
        pos[static_cast<size_t>(i)] = i;
      }
      num[static_cast<size_t>(at)] = nan;
      for (const int64_t lo : {int64_t{0}, int64_t{2}, at + 1}) {
        const int64_t want = argmin_in_window_reference(num.data(), nullptr, pos.data(), n, lo, n);
        EXPECT_EQ(argmin_in_window(num.data(), nullptr, pos.data(), n, lo, n), want)
            << "n " << n << " NaN at " << at << " lo " << lo;
      }
      // 0 / 0 is NaN too: a zero count divided into a zero score
      std::vector<double> den(static_cast<size_t>(n), 2.0);
      num[static_cast<size_t>(at)] = 0.0;
      den[static_cast<size_t>(at)] = 0.0;
      const int64_t want = argmin_in_window_reference(num.data(), den.data(), pos.data(), n, 0, n);
      EXPECT_EQ(argmin_in_window(num.data(), den.data(), pos.data(), n, 0, n), want) << n;
    }
  }
}

// An independent statement of the rule for windows without NaN keys: the slots in the window
// with the lowest key, of those the ones at the lowest position, of those the first.
int64_t brute_force(const std::vector<double>& key, const std::vector<int64_t>& pos, int64_t lo,
                    int64_t hi) {
  std::vector<int64_t> in;
  for (int64_t i = 0; i < static_cast<int64_t>(key.size()); ++i)
    if (pos[static_cast<size_t>(i)] >= lo && pos[static_cast<size_t>(i)] < hi) in.push_back(i);
  if (in.empty()) return -1;
  return *std::min_element(in.begin(), in.end(), [&](int64_t a, int64_t b) {
    const double ka = key[static_cast<size_t>(a)], kb = key[static_cast<size_t>(b)];
    if (ka != kb) return ka < kb;
    if (pos[static_cast<size_t>(a)] != pos[static_cast<size_t>(b)])
      return pos[static_cast<size_t>(a)] < pos[static_cast<size_t>(b)];
    return a < b;
  });
}

// Hostile values: counts of 0, negative, infinite and subnormal (quotients of +-inf, NaN or
// huge), keys of +-inf and +-0, negative and repeated positions, the int64 extremes, windows
// with lo > hi. Against the ordered pass always, and against brute_force when no key in the
// window is NaN.
TEST(EvictionArgmin, HostileCountsKeysAndPositions) {
  vq::Rng rng(11);
  const double inf = std::numeric_limits<double>::infinity();
  const double keys[] = {0.0, -0.0, 1.0, -1.0, inf, -inf, 2.5, 1e-300};
  const double dens[] = {0.0, -1.0, inf, 1e-310, 2.5, 1.0};
  const int64_t big = std::numeric_limits<int64_t>::max(),
                small = std::numeric_limits<int64_t>::min();
  const int64_t edges[] = {small, -5, -1, 0, 1, 7, big - 1, big};
  int checked = 0, oracle = 0;
  for (int64_t n = 0; n <= 40; ++n) {
    for (int trial = 0; trial < 30; ++trial) {
      std::vector<double> num(static_cast<size_t>(n)), den(static_cast<size_t>(n));
      std::vector<int64_t> pos(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        num[static_cast<size_t>(i)] = keys[static_cast<int>(rng.uniform(0.0, 8.0))];
        den[static_cast<size_t>(i)] = dens[static_cast<int>(rng.uniform(0.0, 6.0))];
        pos[static_cast<size_t>(i)] = edges[static_cast<int>(rng.uniform(0.0, 8.0))];
      }
      const int64_t lo = edges[static_cast<int>(rng.uniform(0.0, 8.0))];
      const int64_t hi = edges[static_cast<int>(rng.uniform(0.0, 8.0))];
      const double* ds[2] = {nullptr, den.data()};
      for (const double* d : ds) {
        const int64_t want = argmin_in_window_reference(num.data(), d, pos.data(), n, lo, hi);
        EXPECT_EQ(argmin_in_window(num.data(), d, pos.data(), n, lo, hi), want)
            << "n " << n << " trial " << trial << " den " << (d != nullptr);
        std::vector<double> key(static_cast<size_t>(n));
        bool nan = false;
        for (int64_t i = 0; i < n; ++i) {
          key[static_cast<size_t>(i)] =
              d ? num[static_cast<size_t>(i)] / d[i] : num[static_cast<size_t>(i)];
          nan = nan || (std::isnan(key[static_cast<size_t>(i)]) &&
                        pos[static_cast<size_t>(i)] >= lo && pos[static_cast<size_t>(i)] < hi);
        }
        if (!nan) {
          EXPECT_EQ(want, brute_force(key, pos, lo, hi)) << "n " << n << " trial " << trial;
          ++oracle;
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 41 * 30 * 2);
  EXPECT_GT(oracle, checked / 4);
}

TEST(EvictionArgmin, AnEmptyWindowHasNoSlot) {
  const std::vector<double> num = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::vector<int64_t> pos = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(argmin_in_window(num.data(), nullptr, pos.data(), 10, 4, 4), -1);
  EXPECT_EQ(argmin_in_window(num.data(), nullptr, pos.data(), 10, 10, 20), -1);
  EXPECT_EQ(argmin_in_window(num.data(), nullptr, pos.data(), 0, 0, 20), -1);
  EXPECT_EQ(argmin_in_window(num.data(), nullptr, pos.data(), 10, 9, 10), 9);
}

}  // namespace

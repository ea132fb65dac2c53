// The DP allocator and its comparisons: exactness against brute force, the uniform-variance
// collapse, local optimality, monotonicity, zero bits for near-zero variance, scale-independent
// ties; plus water-filling, the uniform / split rules, and the fitted distortion curve.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "coding/bit_allocation.hpp"
#include "coding/distortion_fit.hpp"
#include "core/rng.hpp"
#include "veloxquant/errors.hpp"

namespace vq::coding {
namespace {

const std::vector<int> kDefaultChoices{0, 1, 2, 3, 4, 6, 8};
const std::vector<int> kContiguous{0, 1, 2, 3, 4, 5, 6, 7, 8};

int64_t sum(const std::vector<int>& b) {
  int64_t s = 0;
  for (int x : b) s += x;
  return s;
}

bool in_choices(int b, const std::vector<int>& choices) {
  for (int c : choices)
    if (c == b) return true;
  return false;
}

/// Minimum total distortion over every assignment with sum <= budget (exhaustive).
double brute_force_min(const std::vector<double>& v, int64_t budget,
                       const std::vector<int>& choices, double beta,
                       std::vector<int>* best_alloc = nullptr) {
  const size_t n = v.size();
  std::vector<int> cur(n);
  double best = INFINITY;
  std::function<void(size_t, int64_t)> rec = [&](size_t i, int64_t left) {
    if (i == n) {
      const double d = total_distortion(v, cur, beta);
      if (d < best) {
        best = d;
        if (best_alloc) *best_alloc = cur;
      }
      return;
    }
    for (int c : choices) {
      if (c > left) continue;
      cur[i] = c;
      rec(i + 1, left - c);
    }
  };
  rec(0, budget);
  return best;
}

std::vector<double> random_variances(Rng& rng, size_t n, double log_span) {
  std::vector<double> v(n);
  for (auto& x : v) x = std::exp(rng.uniform(-log_span, log_span));
  return v;
}

TEST(CodingBitAlloc, UniformVarianceCollapsesToFloorPlusRemainder) {
  for (double scale : {1.0, 3.7, 1e-6, 2.5e7}) {
    for (int64_t n = 1; n <= 12; ++n) {
      for (int64_t B = 0; B <= 8 * n + 5; ++B) {
        const std::vector<double> v(static_cast<size_t>(n), scale);
        const auto bits = dp_allocate_bits(v, B, kContiguous, 3.5);
        for (int64_t i = 0; i < n; ++i) {
          const int64_t expect = std::min<int64_t>(8, B / n + (i < B % n ? 1 : 0));
          ASSERT_EQ(bits[static_cast<size_t>(i)], expect)
              << "n=" << n << " B=" << B << " scale=" << scale << " i=" << i;
        }
      }
    }
  }
}

TEST(CodingBitAlloc, MatchesBruteForceForSmallN) {
  Rng rng(11);
  const std::vector<std::vector<int>> choice_sets{kDefaultChoices, kContiguous, {0, 2, 5}, {0, 8}};
  int cases = 0;
  for (size_t n = 1; n <= 5; ++n) {
    for (const auto& choices : choice_sets) {
      for (int rep = 0; rep < 6; ++rep) {
        const auto v = random_variances(rng, n, 6.0);
        const double beta = rng.uniform(1.5, 6.0);
        for (int64_t B = 0; B <= static_cast<int64_t>(8 * n) + 2;
             B += 1 + static_cast<int64_t>(n / 3)) {
          const auto bits = dp_allocate_bits(v, B, choices, beta);
          ASSERT_EQ(bits.size(), n);
          ASSERT_LE(sum(bits), B) << "budget exceeded";
          for (int b : bits) ASSERT_TRUE(in_choices(b, choices));
          const double best = brute_force_min(v, B, choices, beta);
          const double got = total_distortion(v, bits, beta);
          double total_v = 0;
          for (double x : v) total_v += x;
          // Exact up to the documented tie tolerance (1e-12 of the total variance per decision).
          ASSERT_LE(got, best + 1e-12 * total_v * static_cast<double>(n) + 1e-14 * best)
              << "n=" << n << " B=" << B;
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 400);
}

TEST(CodingBitAlloc, NoSingleReallocationImproves) {
  Rng rng(5);
  for (int rep = 0; rep < 20; ++rep) {
    const size_t n = 24;
    const auto v = random_variances(rng, n, 5.0);
    const int64_t B = 20 + static_cast<int64_t>(rng.below(120));
    const auto bits = dp_allocate_bits(v, B, kDefaultChoices, 3.5);
    const double base = total_distortion(v, bits, 3.5);
    const int64_t used = sum(bits);
    ASSERT_LE(used, B);
    // Change one component to any other width, or move one component's width while another
    // changes too (every pair of single-step changes), whenever the result fits the budget.
    for (size_t i = 0; i < n; ++i) {
      for (int ci : kDefaultChoices) {
        auto alt = bits;
        alt[i] = ci;
        if (sum(alt) <= B) {
          ASSERT_GE(total_distortion(v, alt, 3.5), base * (1 - 1e-12)) << "single change " << i;
        }
        for (size_t j = 0; j < n; ++j) {
          if (j == i) continue;
          for (int cj : kDefaultChoices) {
            auto alt2 = alt;
            alt2[j] = cj;
            if (sum(alt2) <= B) {
              ASSERT_GE(total_distortion(v, alt2, 3.5), base * (1 - 1e-12))
                  << "moving bits between " << i << " and " << j;
            }
          }
        }
      }
    }
  }
}

TEST(CodingBitAlloc, HigherVarianceNeverGetsFewerBits) {
  Rng rng(9);
  for (int rep = 0; rep < 50; ++rep) {
    const size_t n = 2 + rng.below(40);
    const auto v = random_variances(rng, n, 8.0);  // unsorted, distinct with probability 1
    const int64_t B = static_cast<int64_t>(rng.below(8 * n + 1));
    using Alloc =
        std::vector<int> (*)(const std::vector<double>&, int64_t, const std::vector<int>&, double);
    for (Alloc alloc : {Alloc{&dp_allocate_bits}, Alloc{&waterfill_allocate_bits}}) {
      const auto bits = alloc(v, B, kDefaultChoices, 3.5);
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < n; ++j)
          if (v[i] > v[j] * (1 + 1e-9)) {
            ASSERT_GE(bits[i], bits[j]) << "i=" << i << " j=" << j;
          }
    }
  }
}

TEST(CodingBitAlloc, NearZeroVarianceGetsZeroBits) {
  // Tight budget: the near-noise component is dropped while the others get several bits.
  const std::vector<double> v{10.0, 5.0, 1.0, 1e-9};
  const auto bits = dp_allocate_bits(v, 12, kDefaultChoices, 3.5);
  EXPECT_EQ(bits[3], 0);
  EXPECT_GT(bits[0], 3);
  // A component with exactly zero variance never takes bits, however generous the budget.
  const std::vector<double> w{2.0, 0.0, 1.0, 0.0};
  const auto wb = dp_allocate_bits(w, 1000, kDefaultChoices, 3.5);
  EXPECT_EQ(wb, (std::vector<int>{8, 0, 8, 0}));
  // All zero: nothing is spent.
  EXPECT_EQ(dp_allocate_bits(std::vector<double>(5, 0.0), 40, kDefaultChoices, 3.5),
            std::vector<int>(5, 0));
}

TEST(CodingBitAlloc, TiesDoNotDependOnTheScaleOfTheVariances) {
  Rng rng(21);
  for (int rep = 0; rep < 30; ++rep) {
    // Repeated values create ties between permutations; the result must not change with scale.
    std::vector<double> v;
    for (int g = 0; g < 4; ++g) {
      const double x = std::exp(rng.uniform(-3, 3));
      for (uint64_t k = 0; k < 1 + rng.below(4); ++k) v.push_back(x);
    }
    const int64_t B = static_cast<int64_t>(rng.below(6 * v.size()));
    const auto ref = dp_allocate_bits(v, B, kDefaultChoices, 3.5);
    for (double scale : {3.0, 1e-7, 7.3e5, 0.1}) {
      std::vector<double> s = v;
      for (auto& x : s) x *= scale;
      ASSERT_EQ(dp_allocate_bits(s, B, kDefaultChoices, 3.5), ref) << "scale " << scale;
    }
  }
}

TEST(CodingBitAlloc, BudgetCapsAndEdgeCases) {
  EXPECT_TRUE(dp_allocate_bits({}, 10, kDefaultChoices, 3.5).empty());
  EXPECT_EQ(dp_allocate_bits({1.0, 2.0}, 0, kDefaultChoices, 3.5), (std::vector<int>{0, 0}));
  EXPECT_EQ(dp_allocate_bits({1.0, 2.0}, 1 << 20, kDefaultChoices, 3.5), (std::vector<int>{8, 8}));
  EXPECT_THROW(dp_allocate_bits({1.0}, -1, kDefaultChoices, 3.5), InvalidArgument);
  EXPECT_THROW(dp_allocate_bits({1.0}, 4, kDefaultChoices, 1.0), InvalidArgument);
}

TEST(CodingBitAlloc, NormalizeBitChoices) {
  EXPECT_EQ(normalize_bit_choices({8, 0, 2, 2, 4}), (std::vector<int>{0, 2, 4, 8}));
  EXPECT_THROW(normalize_bit_choices({}), InvalidArgument);
  EXPECT_THROW(normalize_bit_choices({1, 2}), InvalidArgument);
  EXPECT_THROW(normalize_bit_choices({0, 9}), InvalidArgument);
}

TEST(CodingBitAlloc, WaterfillFitsTheBudgetAndNeverBeatsDp) {
  Rng rng(13);
  for (int rep = 0; rep < 60; ++rep) {
    const size_t n = 1 + rng.below(48);
    auto v = random_variances(rng, n, 6.0);
    if (rep % 5 == 0) v[0] = 0.0;
    const int64_t B = static_cast<int64_t>(rng.below(8 * n + 10));
    for (const auto& choices : {kDefaultChoices, kContiguous}) {
      const auto w = waterfill_allocate_bits(v, B, choices, 3.5);
      const auto d = dp_allocate_bits(v, B, choices, 3.5);
      ASSERT_LE(sum(w), B);
      for (int b : w) ASSERT_TRUE(in_choices(b, choices));
      if (rep % 5 == 0) {
        ASSERT_EQ(w[0], 0) << "zero variance takes no bits";
      }
      ASSERT_LE(total_distortion(v, d, 3.5), total_distortion(v, w, 3.5) * (1 + 1e-12));
    }
  }
}

TEST(CodingBitAlloc, WaterfillFollowsTheClosedFormWhenItIsFeasible) {
  // Variances a factor beta^2 apart: the continuous solution is already integral (b_avg +- 2).
  const double beta = 3.5;
  const std::vector<double> v{beta * beta * beta * beta, beta * beta, 1.0};
  EXPECT_EQ(waterfill_allocate_bits(v, 12, kContiguous, beta), (std::vector<int>{6, 4, 2}));
}

TEST(CodingBitAlloc, UniformAndSplitRules) {
  EXPECT_EQ(uniform_allocate_bits(5, 12, 8), (std::vector<int>{3, 3, 2, 2, 2}));
  EXPECT_EQ(uniform_allocate_bits(32, 64, 8), std::vector<int>(32, 2));
  EXPECT_EQ(uniform_allocate_bits(2, 100, 8), (std::vector<int>{8, 8}));
  // n = 32: n_hi = 8, lo = 64 / 40 = 1, hi = 2 -> 40 of 64 bits used.
  auto s = split_allocate_bits(32, 64, 8);
  EXPECT_EQ(sum(s), 40);
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(s[i], i < 8 ? 2 : 1);
  // n = 3: n_hi = max(1, 0) = 1; lo = 10 / 4 = 2 -> (4, 2, 2).
  EXPECT_EQ(split_allocate_bits(3, 10, 8), (std::vector<int>{4, 2, 2}));
  // hi is capped at 8.
  EXPECT_EQ(split_allocate_bits(4, 1000, 8), (std::vector<int>{8, 4, 4, 4}));
  EXPECT_EQ(split_allocate_bits(4, 4, 8), (std::vector<int>{0, 0, 0, 0}));
}

TEST(CodingBitAlloc, DistortionCurveFitOfTheAffineQuantizer) {
  const DistortionFit fit = fit_distortion_curve();
  ASSERT_EQ(fit.measured_mse.size(), 8u);
  for (size_t k = 1; k < fit.measured_mse.size(); ++k)
    EXPECT_LT(fit.measured_mse[k], fit.measured_mse[k - 1]);
  // Each extra bit roughly quarters the error at high rate, so beta lands between 3 and 6.
  EXPECT_GT(fit.beta, 3.0);
  EXPECT_LT(fit.beta, 6.0);
  // Deterministic.
  EXPECT_EQ(fit_distortion_curve().beta, fit.beta);
  std::printf("fitted distortion curve: alpha = %.4f, beta = %.4f\n", fit.alpha, fit.beta);
  EXPECT_THROW(fit_distortion_curve({3}), InvalidArgument);
}

}  // namespace
}  // namespace vq::coding

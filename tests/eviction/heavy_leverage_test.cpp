// HeavyLeverage (curdkv solver=heavy): the subspace iterated on the rows that hold the weighted
// block's energy, light rows scored from the projection they got when last projected.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.hpp"
#include "eviction/heavy_leverage.hpp"
#include "eviction/leverage.hpp"
#include "veloxquant/row_source.hpp"

namespace {

using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using vq::eviction::HeavyLeverage;
using vq::eviction::HeavyLimits;

void fill_row(RowMatF& V, int64_t i, vq::Rng& rng) {
  for (int64_t d = 0; d < V.cols(); ++d)
    V(i, d) = static_cast<float>(rng.normal() / (1.0 + 0.2 * static_cast<double>(d)));
}

// n rows of D values from fill_row
RowMatF random_rows(int64_t n, int64_t D, vq::Rng& rng) {
  RowMatF V(n, D);
  for (int64_t i = 0; i < n; ++i) fill_row(V, i, rng);
  return V;
}

// softmax of scaled normals: a few rows carry most of the weight, like real attention
std::vector<double> peaky_weights(int64_t n, double spread, vq::Rng& rng) {
  std::vector<double> a(static_cast<size_t>(n));
  double sum = 0;
  for (auto& x : a) sum += (x = std::exp(spread * rng.normal()));
  for (auto& x : a) x /= sum;
  return a;
}

// the closed form a_i^2 ||v_i||^2 / sum_j a_j^2 ||v_j||^2 of rows [0, n): every direction kept, an
// upper bound on each row's leverage at any rank
std::vector<double> closed_form(const RowMatF& V, const std::vector<double>& a, int64_t n) {
  std::vector<double> e(static_cast<size_t>(n));
  double E = 0;
  for (int64_t i = 0; i < n; ++i) {
    e[static_cast<size_t>(i)] =
        a[static_cast<size_t>(i)] * a[static_cast<size_t>(i)] * V.row(i).squaredNorm();
    E += e[static_cast<size_t>(i)];
  }
  for (double& x : e) x /= E;
  return e;
}

// the oracle's leverage of diag(a) V (rows [0, n)) at rank r
std::vector<double> oracle(const RowMatF& V, const std::vector<double>& a, int64_t n, int64_t r) {
  const int64_t D = V.cols();
  std::vector<double> W(static_cast<size_t>(n * D)), out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d)
      W[static_cast<size_t>(i * D + d)] = a[static_cast<size_t>(i)] * static_cast<double>(V(i, d));
  vq::eviction::leverage_reference(W.data(), n, D, r, out.data());
  return out;
}

// The seed (the newcomer's leverage in [c W; a_new v], v = row n of V1) and the oracle's value
// for it on the enlarged block; `lev` has just scored rows [0, n) of V1 under weights a.
std::pair<double, double> seed_and_oracle(HeavyLeverage& lev, const RowMatF& V1,
                                          const std::vector<double>& a, int64_t n, int64_t r,
                                          double c, double a_new) {
  const int64_t D = V1.cols();
  Eigen::VectorXd w(D);
  for (int64_t d = 0; d < D; ++d) w(d) = a_new * static_cast<double>(V1(n, d));
  const double seed = lev.seed_scaled(c, w.data(), D, r);
  std::vector<double> a1(a.begin(), a.begin() + n);
  for (auto& x : a1) x *= c;
  a1.push_back(a_new);
  return {seed, oracle(V1, a1, n + 1, r)[static_cast<size_t>(n)]};
}

// Head dims through every path of the orthonormalization: padded to a whole group of eight (20),
// groups counted at run time (32) and the compiled 64 and 128.
class HeavyDims : public ::testing::TestWithParam<int64_t> {};

TEST_P(HeavyDims, RepeatedCallsOnOneBlockConvergeToTheOracle) {
  // Every row heavy (mass 1, no cap): the warm-started iteration is plain subspace iteration on
  // the block's Gram matrix, so calls on an unchanged block converge to the exact subspace.
  vq::Rng rng(5);
  const int64_t n = 60, D = GetParam(), r = 6;
  RowMatF V(n, D);
  for (int64_t i = 0; i < n; ++i) fill_row(V, i, rng);
  const auto a = peaky_weights(n, 1.0, rng);
  const vq::store::Fp32Rows Vs(V.data(), n, D);
  HeavyLeverage lev(HeavyLimits{1.0, 1 << 20, 1});
  std::vector<double> got(static_cast<size_t>(n));
  for (int it = 0; it < 300; ++it) lev.score(Vs, a.data(), n, r, got.data());
  EXPECT_EQ(lev.heavy_rows(), n);
  const auto want = oracle(V, a, n, r);
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  EXPECT_LT(worst, 2e-5) << "largest gap to the SVD oracle after convergence";
  // and the seed: the newcomer's leverage in [c W; w] against the oracle on the enlarged block
  RowMatF V1(n + 1, D);
  V1.topRows(n) = V;
  fill_row(V1, n, rng);
  const auto [seed, want_seed] = seed_and_oracle(lev, V1, a, n, r, 0.8, 0.2);
  // Rayleigh-Ritz in span(Q, u) is exact when the enlarged block's top directions lie there;
  // here it is within a small fraction of the newcomer's leverage
  EXPECT_NEAR(seed, want_seed, 0.02 * want_seed + 1e-6);
}

TEST(HeavyLeverage, RefreshHoldsTheBasisBetweenIterations) {
  // refresh = R: the basis moves on every R-th call; on the calls in between the rows are scored
  // against the held basis, so a call between iterations on a changed block gives exactly what
  // projecting that block on the last basis gives, and R = 1 iterates on every call.
  vq::Rng rng(9);
  const int64_t n = 48, D = 24, r = 4;
  const RowMatF V = random_rows(n, D, rng);
  const vq::store::Fp32Rows Vs(V.data(), n, D);
  for (const int64_t R : {1, 3}) {
    SCOPED_TRACE(R);
    HeavyLeverage lev(HeavyLimits{1.0, 1 << 20, 1, R});
    std::vector<double> got(static_cast<size_t>(n)), first(got);
    std::vector<std::vector<double>> weights;
    for (int call = 0; call < 10; ++call) weights.push_back(peaky_weights(n, 1.0, rng));
    for (int call = 0; call < 10; ++call) {
      lev.score(Vs, weights[static_cast<size_t>(call)].data(), n, r, got.data());
      if (call == 0) {
        EXPECT_EQ(lev.cold_starts(), 1);
      }
    }
    // one cold start, then an iteration on every R-th of the other nine calls
    EXPECT_EQ(lev.iterations(), 9 / R);
    if (R == 1) continue;
    // every row heavy, so a call that holds the basis scores a block exactly as the call before
    // it did when both hold the same basis
    HeavyLeverage twin(HeavyLimits{1.0, 1 << 20, 1, R});
    for (int call = 0; call < 7; ++call)
      twin.score(Vs, weights[static_cast<size_t>(call)].data(), n, r, got.data());
    // calls 7 and 8 hold the basis iterated at call 6 (1 + 2 * 3): both score with it
    twin.score(Vs, weights[0].data(), n, r, first.data());
    twin.score(Vs, weights[0].data(), n, r, got.data());
    EXPECT_EQ(twin.iterations(), 2);
    EXPECT_EQ(first, got) << "a held basis scores the same block the same way";
  }
}

TEST(HeavyLeverage, ScoresAreBoundedByTheClosedFormAndSumBelowOne) {
  vq::Rng rng(9);
  const int64_t n = 200, D = 64, r = 16;
  const RowMatF V = random_rows(n, D, rng);
  const vq::store::Fp32Rows Vs(V.data(), n, D);
  HeavyLeverage lev;  // defaults: 99% of the energy, at most 16 rows
  std::vector<double> l(static_cast<size_t>(n));
  for (int step = 0; step < 20; ++step) {
    const auto a = peaky_weights(n, 2.5, rng);
    lev.score(Vs, a.data(), n, r, l.data());
    const auto closed = closed_form(V, a, n);
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_GE(l[static_cast<size_t>(i)], 0.0);
      ASSERT_LE(l[static_cast<size_t>(i)], closed[static_cast<size_t>(i)] * (1 + 1e-5) + 1e-12)
          << "row " << i;
      total += l[static_cast<size_t>(i)];
    }
    EXPECT_LE(total, 1.0 + 1e-5);
    EXPECT_GE(lev.heavy_rows(), r);
    EXPECT_LE(lev.heavy_rows(), 16);
  }
}

TEST(HeavyLeverage, HeavyRowsFollowTheOracleOnPeakyAttention) {
  // Real attention is concentrated: a handful of rows hold 99% of the weighted energy. After a
  // few tokens' warm-up their leverages are close to the oracle's, and the light rows' are small.
  vq::Rng rng(21);
  const int64_t n = 300, D = 64, r = 8;
  RowMatF V(n, D);
  for (int64_t i = 0; i < n; ++i) fill_row(V, i, rng);
  const vq::store::Fp32Rows Vs(V.data(), n, D);
  HeavyLeverage lev;
  std::vector<double> l(static_cast<size_t>(n));
  double worst = 0;
  for (int step = 0; step < 40; ++step) {
    const auto a = peaky_weights(n, 3.0, rng);
    lev.score(Vs, a.data(), n, r, l.data());
    if (step < 10) continue;
    const auto want = oracle(V, a, n, r);
    for (size_t i = 0; i < l.size(); ++i) worst = std::max(worst, std::fabs(l[i] - want[i]));
  }
  EXPECT_LT(worst, 0.05) << "largest per-token leverage gap";
}

TEST(HeavyLeverage, SlotReportsMoveTheCachedProjections) {
  // Two trackers see the same rows; one is told about every slot change, the other only that
  // every row is new (invalidate). With every row heavy, every projection is recomputed each
  // call, so both give the same bits: the cache holds nothing the result depends on. With a small
  // heavy set and no sweep, the informed tracker's light rows keep their old projections, so the
  // two differ: the cache is used.
  for (const bool all_heavy : {true, false}) {
    vq::Rng rng(17);
    const int64_t n = 40, D = 32, r = 4;
    RowMatF V(n + 1, D);
    for (int64_t i = 0; i <= n; ++i) fill_row(V, i, rng);
    const HeavyLimits lim = all_heavy ? HeavyLimits{1.0, 1 << 20, 0} : HeavyLimits{0.5, 6, 0};
    HeavyLeverage informed(lim), fresh(lim);
    std::vector<double> li(static_cast<size_t>(n)), lf(li.size());
    Eigen::VectorXd w(D);
    int64_t differs = 0;
    for (int step = 0; step < 60; ++step) {
      const auto a = peaky_weights(n, 2.0, rng);
      fresh.invalidate();
      const vq::store::Fp32Rows Vs(V.data(), n, D);
      informed.score(Vs, a.data(), n, r, li.data());
      fresh.score(Vs, a.data(), n, r, lf.data());
      for (int64_t d = 0; d < D; ++d) w(d) = 0.1 * V(n, d);
      const double si = informed.seed_scaled(0.9, w.data(), D, r);
      const double sf = fresh.seed_scaled(0.9, w.data(), D, r);
      if (all_heavy) {
        for (size_t i = 0; i < li.size(); ++i) ASSERT_EQ(li[i], lf[i]) << "step " << step;
        ASSERT_EQ(si, sf);
      }
      differs += li != lf;
      // the cached norms belong to the rows now in their slots: no score above its closed form
      const auto closed = closed_form(V, a, n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_LE(li[static_cast<size_t>(i)], closed[static_cast<size_t>(i)] * (1 + 1e-5) + 1e-12)
            << "step " << step << " row " << i;
      // CurDKV's slot changes: append at slot n, then the last row moves into an evicted slot
      fill_row(V, n, rng);
      const auto victim = static_cast<int64_t>(rng.below(static_cast<uint32_t>(n)));
      informed.row_replaced(n);
      V.row(victim) = V.row(n);
      informed.row_moved(n, victim);
      // and a scored row moved into another slot, its own slot refilled
      const auto from = static_cast<int64_t>(rng.below(static_cast<uint32_t>(n)));
      const auto to = static_cast<int64_t>(rng.below(static_cast<uint32_t>(n)));
      if (from != to) {
        V.row(to) = V.row(from);
        informed.row_moved(from, to);
        fill_row(V, from, rng);
        informed.row_replaced(from);
      }
      fill_row(V, n, rng);
    }
    if (!all_heavy) {
      EXPECT_GT(differs, 0);
    }
  }
}

TEST_P(HeavyDims, DegenerateBlocksGiveFiniteScores) {
  const int64_t n = 30, D = GetParam(), r = 4;
  RowMatF V = RowMatF::Zero(n, D);
  std::vector<double> a(static_cast<size_t>(n), 1.0 / n), l(static_cast<size_t>(n), -1);
  const vq::store::Fp32Rows Vs(V.data(), n, D);
  HeavyLeverage lev;
  lev.score(Vs, a.data(), n, r, l.data());
  for (double x : l) EXPECT_EQ(x, 0.0);
  Eigen::VectorXd w = Eigen::VectorXd::Ones(D);
  EXPECT_DOUBLE_EQ(lev.seed_scaled(0.5, w.data(), D, r), 1.0) << "the newcomer holds all energy";
  // rank-1 block: every row the same direction
  for (int64_t i = 0; i < n; ++i) V.row(i).setConstant(static_cast<float>(i + 1));
  lev.invalidate();  // every row rewritten in place
  for (int step = 0; step < 3; ++step) {
    lev.score(Vs, a.data(), n, r, l.data());
    double total = 0;
    for (double x : l) {
      EXPECT_TRUE(std::isfinite(x));
      total += x;
    }
    EXPECT_NEAR(total, 1.0, 1e-5) << "one direction holds the whole block";
  }
}

// The basis span_basis should build on the heavy rows T (in their order): Gram-Schmidt in double
// (two passes), a row left with under 1e-13 of its squared length replaced by the coordinate axis
// the basis so far covers least (the first of them).
Eigen::MatrixXd span_reference(const RowMatF& V, const std::vector<int64_t>& T) {
  const int64_t D = V.cols();
  Eigen::MatrixXd B(D, static_cast<Eigen::Index>(T.size()));
  Eigen::Index c = 0;
  const auto project_out = [&](Eigen::VectorXd& x) {
    for (int pass = 0; pass < 2; ++pass) x -= B.leftCols(c) * (B.leftCols(c).transpose() * x);
  };
  for (const int64_t i : T) {
    Eigen::VectorXd x = V.row(i).cast<double>().transpose();
    const double s0 = x.squaredNorm();
    project_out(x);
    if (!(x.squaredNorm() > 1e-13 * s0)) {
      const Eigen::VectorXd cover = B.leftCols(c).rowwise().squaredNorm();
      Eigen::Index axis = 0;
      for (Eigen::Index d = 1; d < D; ++d)
        if (cover(d) < cover(axis)) axis = d;
      x = Eigen::VectorXd::Unit(D, axis);
      project_out(x);
    }
    B.col(c++) = x.normalized();
  }
  return B;
}

TEST_P(HeavyDims, AsManyHeavyRowsAsTheRankScoreAgainstTheirOwnSpan) {
  // heavy_rows = r: the top-r eigenspace of the heavy rows' Gram matrix is their span, built by
  // Cholesky QR (span_basis). `lev` re-projects every row on every call (sweep = 1), so each
  // score is a_i^2 ||B^T v_i||^2 / E for B the basis span_reference builds; `held` never
  // sweeps, so its heavy rows' scores come from their coordinates in the basis (L). The seed is
  // the newcomer's leverage in the block of the heavy rows and the newcomer, over the whole
  // enlarged block's energy. Then heavy rows made equal to others, one early and one late in
  // the order (each replaced by an axis inside the factorization, counted), and one made equal
  // to another plus 1e-5 of a light row (a direction of its own too short for Cholesky QR: the
  // rows go through Gram-Schmidt, counted). Ranks 8, 12 and 16: one or two 8 x 8 blocks of the
  // Gram matrix, with and without padding rows.
  const int64_t D = GetParam(), n = 90;
  for (const int64_t r : {8, 12, 16}) {
    if (r >= D) continue;  // every direction kept: no basis to build
    SCOPED_TRACE(r);
    vq::Rng rng(static_cast<uint64_t>(77 + r));
    RowMatF V = random_rows(n + 1, D, rng);
    const vq::store::Fp32Rows Vs(V.data(), n, D);
    HeavyLeverage lev(HeavyLimits{0.99, r, 1}), held(HeavyLimits{0.99, r, 0});
    std::vector<double> l(static_cast<size_t>(n)), lh(l.size());
    const auto check = [&](const std::vector<double>& a, const char* what) {
      SCOPED_TRACE(what);
      const auto& T = lev.heavy_slots();
      ASSERT_EQ(static_cast<int64_t>(T.size()), r);
      ASSERT_EQ(held.heavy_slots(), T);
      const Eigen::MatrixXd B = span_reference(V, T);
      double E = 0;
      for (int64_t i = 0; i < n; ++i)
        E += a[static_cast<size_t>(i)] * a[static_cast<size_t>(i)] *
             V.row(i).cast<double>().squaredNorm();
      for (int64_t i = 0; i < n; ++i) {
        const double ai = a[static_cast<size_t>(i)];
        const double want =
            ai * ai * (B.transpose() * V.row(i).cast<double>().transpose()).squaredNorm() / E;
        ASSERT_NEAR(l[static_cast<size_t>(i)], want, 1e-5 * want + 1e-9) << "row " << i;
        if (std::find(T.begin(), T.end(), i) != T.end()) {
          ASSERT_NEAR(lh[static_cast<size_t>(i)], want, 1e-5 * want + 1e-9) << "heavy row " << i;
        }
      }
      // the seed against the oracle on [c diag(a_T) V_T; w]
      const double c = 0.8, a_new = 0.2;
      Eigen::VectorXd w(D);
      for (int64_t d = 0; d < D; ++d) w(d) = a_new * static_cast<double>(V(n, d));
      std::vector<double> Wt(static_cast<size_t>((r + 1) * D)), lt(static_cast<size_t>(r + 1));
      double Eb = 0;
      for (int64_t j = 0; j <= r; ++j)
        for (int64_t d = 0; d < D; ++d) {
          const double x = j < r ? c * a[static_cast<size_t>(T[static_cast<size_t>(j)])] *
                                       static_cast<double>(V(T[static_cast<size_t>(j)], d))
                                 : w(d);
          Wt[static_cast<size_t>(j * D + d)] = x;
          Eb += x * x;
        }
      vq::eviction::leverage_reference(Wt.data(), r + 1, D, r, lt.data());
      const double want_seed = lt[static_cast<size_t>(r)] * Eb / (c * c * E + w.squaredNorm());
      EXPECT_NEAR(lev.seed_scaled(c, w.data(), D, r), want_seed, 1e-5 * want_seed + 1e-9);
      EXPECT_NEAR(held.seed_scaled(c, w.data(), D, r), want_seed, 1e-5 * want_seed + 1e-9);
    };
    const auto both_score = [&](const std::vector<double>& a) {
      lev.score(Vs, a.data(), n, r, l.data());
      held.score(Vs, a.data(), n, r, lh.data());
    };
    const auto both_replaced = [&](int64_t i) {
      lev.row_replaced(i);
      held.row_replaced(i);
    };
    for (int step = 0; step < 4; ++step) {
      const auto a = peaky_weights(n, 2.0, rng);
      both_score(a);
      if (step > 0) check(a, "distinct rows");  // the first call is the exact cold start
    }
    EXPECT_EQ(lev.span_axes() + lev.span_fallbacks(), 0);
    // two heavy rows copied into others: one near the top of the order, one at its end
    auto a = peaky_weights(n, 2.0, rng);
    both_score(a);
    std::vector<int64_t> T = lev.heavy_slots();
    for (const auto& [of, dup] : {std::pair{T[0], T[1]}, std::pair{T[r - 2], T[r - 1]}}) {
      V.row(dup) = V.row(of);
      a[static_cast<size_t>(dup)] = a[static_cast<size_t>(of)];  // both still heavy
      both_replaced(dup);
    }
    both_score(a);
    EXPECT_EQ(lev.span_axes(), 2);
    EXPECT_EQ(held.span_axes(), 2);
    EXPECT_EQ(lev.span_fallbacks(), 0);
    check(a, "two rows without a direction of their own");
    // a heavy row a little off another: its own direction, 1e-5 of its length
    a = peaky_weights(n, 2.0, rng);
    both_score(a);
    T = lev.heavy_slots();
    int64_t light = 0;  // a row outside the heavy set: a direction none of them has
    while (std::find(T.begin(), T.end(), light) != T.end()) ++light;
    V.row(T[r - 1]) = V.row(T[r - 2]) + 1e-5f * V.row(light);
    a[static_cast<size_t>(T[r - 1])] = a[static_cast<size_t>(T[r - 2])];
    both_replaced(T[r - 1]);
    const int64_t axes = lev.span_axes();
    both_score(a);
    EXPECT_EQ(lev.span_fallbacks(), 1);
    EXPECT_EQ(lev.span_axes(), axes);
    check(a, "a row 1e-5 off another");
  }
}

INSTANTIATE_TEST_SUITE_P(HeavyLeverage, HeavyDims, ::testing::Values(16, 20, 32, 64, 128));

}  // namespace

// energy_outside_smallest (the seed's Rayleigh-Ritz step, shared with solver=fast) against a full
// eigensolve: dense, diagonal (no reflector to make), tridiagonal and nearly singular matrices,
// a Gram matrix of one row fewer than its size (smallest eigenvalue 0, the bisection bracket's
// lower end) and an indefinite one (below 0: the bracket's check fails and Gershgorin's interval
// is used), sizes from 2 to past head_dim 128 + 1.
TEST(HeavyLeverage, EnergyOutsideTheSmallestDirectionMatchesAFullEigensolve) {
  vq::Rng rng(7);
  int checked = 0;
  for (const int64_t m : {2, 3, 5, 17, 33, 129}) {
    for (int kind = 0; kind < 6; ++kind) {
      Eigen::MatrixXd T(m, m);
      if (kind == 0 || kind >= 3) {
        // Gram matrix (kind 3: its smallest eigenvalue ~1e-9; kind 4: of m - 1 rows, singular;
        // kind 5: shifted down to midway between its two smallest eigenvalues, indefinite)
        Eigen::MatrixXd X(kind == 4 ? m - 1 : m + 3, m);
        for (int64_t i = 0; i < X.size(); ++i) X.data()[i] = rng.normal();
        T = X.transpose() * X;
        if (kind == 5) {
          Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(T);
          const double mid = 0.5 * (es.eigenvalues()(0) + es.eigenvalues()(1));
          T -= mid * Eigen::MatrixXd::Identity(m, m);
        }
        if (kind == 3) {
          Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(T);
          Eigen::VectorXd ev = es.eigenvalues();
          ev(0) = 1e-9 * ev(m - 1);
          T = es.eigenvectors() * ev.asDiagonal() * es.eigenvectors().transpose();
          T = 0.5 * (T + T.transpose()).eval();
        }
      } else {
        T.setZero();
        for (int64_t i = 0; i < m; ++i) T(i, i) = 1.0 + 3.0 * rng.uniform();
        if (kind == 2)
          for (int64_t i = 0; i + 1 < m; ++i) T(i, i + 1) = T(i + 1, i) = 0.4 * rng.normal();
      }
      Eigen::VectorXd b(m);
      for (int64_t i = 0; i < m; ++i) b(i) = rng.normal();
      Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(T);
      const double p = b.dot(es.eigenvectors().col(0));
      const double want = b.squaredNorm() - p * p;
      const double gap = (es.eigenvalues()(1) - es.eigenvalues()(0)) / es.eigenvalues()(m - 1);
      for (const double tol : {0.0, 1e-6}) {
        double got = -1;
        ASSERT_TRUE(vq::eviction::energy_outside_smallest(T, b, got, tol))
            << "m " << m << " kind " << kind << " tol " << tol;
        if (tol > 0 && gap < 1e-2) continue;  // a coarse shift converges only with a gap
        EXPECT_NEAR(got, want, 1e-8 * b.squaredNorm())
            << "m " << m << " kind " << kind << " tol " << tol;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 30);
}

// smallest_below (the seed's shortcut) against an eigensolve: Gram matrices whose smallest
// eigenvalue is planted on either side of tol ||T||_inf (zero, far below, just below, just above,
// far above), an indefinite one, and the zero and non-finite matrices it declines.
TEST(HeavyLeverage, SmallestBelowAgreesWithTheSpectrum) {
  vq::Rng rng(31);
  const double tol = 1e-6;
  int below = 0, above = 0;
  for (const int64_t m : {2, 3, 5, 17, 33, 129}) {
    Eigen::MatrixXd X(m, m);
    for (int64_t i = 0; i < X.size(); ++i) X.data()[i] = rng.normal();
    const Eigen::HouseholderQR<Eigen::MatrixXd> qr(X);
    const Eigen::MatrixXd U = qr.householderQ();
    for (const double f : {0.0, 1e-3, 0.5, 2.0, 1e3, -1.0}) {
      Eigen::VectorXd ev(m);
      for (int64_t i = 0; i < m; ++i) ev(i) = 1.0 + rng.uniform();
      // the planted eigenvalue relative to the norm of the matrix with it at 0 (the norm moves by
      // at most that eigenvalue, far less than the factors' distance from 1)
      ev(0) = 0;
      Eigen::MatrixXd T = U * ev.asDiagonal() * U.transpose();
      double norm = 0;
      for (int64_t i = 0; i < m; ++i) norm = std::max(norm, T.row(i).cwiseAbs().sum());
      ev(0) = f * tol * norm;
      T = U * ev.asDiagonal() * U.transpose();
      T = 0.5 * (T + T.transpose()).eval();
      const bool want = f < 1.0;
      EXPECT_EQ(vq::eviction::smallest_below(T, tol), want) << "m " << m << " factor " << f;
      (want ? below : above) += 1;
    }
  }
  EXPECT_EQ(below, 24);
  EXPECT_EQ(above, 12);
  EXPECT_FALSE(vq::eviction::smallest_below(Eigen::MatrixXd::Zero(4, 4), tol));
  Eigen::MatrixXd bad = Eigen::MatrixXd::Identity(4, 4);
  bad(2, 1) = bad(1, 2) = std::nan("");
  EXPECT_FALSE(vq::eviction::smallest_below(bad, tol));
}

TEST(HeavyLeverage, SeedOnABlockOfFewerDirectionsThanTheRankMatchesTheOracle) {
  // Every stored row lies in a 3-dimensional subspace while r = 8. A newcomer with a part outside
  // the basis makes a 9 x 9 Rayleigh-Ritz matrix of rank at most 5: near-zero eigenvalues, the
  // case the seed answers without an eigenvector step (counted). A newcomer inside that subspace
  // lies in the basis: nothing to drop, no Ritz step at all. The oracle decides on the enlarged
  // block either way.
  vq::Rng rng(41);
  const int64_t n = 60, D = 32, r = 8, k = 3;
  RowMatF B(k, D);
  for (int64_t i = 0; i < k; ++i) fill_row(B, i, rng);
  RowMatF V(n + 1, D);
  for (int64_t i = 0; i < n; ++i) {
    Eigen::RowVectorXf c(k);
    for (int64_t j = 0; j < k; ++j) c(j) = static_cast<float>(rng.normal());
    V.row(i) = c * B;
  }
  const vq::store::Fp32Rows Vs(V.data(), n, D);
  for (const bool inside : {true, false}) {
    SCOPED_TRACE(inside);
    if (inside) {
      V.row(n) = 0.7f * B.row(0) - 0.2f * B.row(2);
    } else {
      fill_row(V, n, rng);
    }
    HeavyLeverage lev;
    std::vector<double> l(static_cast<size_t>(n));
    const auto a = peaky_weights(n, 1.5, rng);
    for (int it = 0; it < 5; ++it) lev.score(Vs, a.data(), n, r, l.data());
    const auto [seed, want] = seed_and_oracle(lev, V, a, n, r, 0.9, 0.1);
    EXPECT_NEAR(seed, want, 1e-5);
    EXPECT_GT(seed, 0.0);
    EXPECT_EQ(lev.seeds_near_null(), inside ? 0 : 1);
  }
}

namespace {

// The heavy set by sorting every row: weights a_i^2 ||v_i||^2 descending (lower slot first on
// ties) among the rows within 2^-32 of the heaviest by the binary exponent and top mantissa
// bits select_heavy bins by, then the weightless rows by slot; the first cap of them.
std::vector<int64_t> heavy_by_sorting(const std::vector<double>& e, int64_t cap) {
  const auto key = [](double x) {
    uint64_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    return static_cast<int64_t>(bits >> 49);
  };
  const int64_t n = static_cast<int64_t>(e.size());
  const int64_t top = key(*std::max_element(e.begin(), e.end()));
  std::vector<int64_t> weighted, weightless;
  for (int64_t i = 0; i < n; ++i)
    (top - key(e[static_cast<size_t>(i)]) >= 256 ? weightless : weighted).push_back(i);
  std::stable_sort(weighted.begin(), weighted.end(), [&](int64_t x, int64_t y) {
    return e[static_cast<size_t>(x)] > e[static_cast<size_t>(y)];
  });
  weighted.insert(weighted.end(), weightless.begin(), weightless.end());
  weighted.resize(static_cast<size_t>(std::min<int64_t>(cap, n)));
  return weighted;
}

TEST(HeavyLeverage, HeavyRowsAreTheHeaviestWhateverTheirSpread) {
  // select_heavy finds its candidates by magnitude bins and a search over them, not by sorting;
  // with heavy_mass = 1 it must return exactly the cap heaviest rows in order, including when
  // every row sits in one bin (the split by further mantissa bits), when rows tie, when fewer
  // than cap rows carry weight (the weightless rows by slot), and for n off the 32-row groups.
  vq::Rng rng(31);
  const int64_t D = 8, r = 2;
  for (const int64_t n : {5, 31, 32, 33, 100, 257, 700}) {
    const RowMatF V = [&] {
      RowMatF m(n, D);
      m.setZero();
      for (int64_t i = 0; i < n; ++i) m(i, i % D) = 1.0f;  // unit rows: e_i = a_i^2
      return m;
    }();
    const vq::store::Fp32Rows Vs(V.data(), n, D);
    for (const std::string kind : {"peaky", "flat", "ties", "few", "spread", "near", "sub"}) {
      SCOPED_TRACE(kind + " n=" + std::to_string(n));
      std::vector<double> a(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        double x = std::exp(3.0 * rng.normal());
        if (kind == "flat") x = 0.25;
        if (kind == "ties") x = 1.0 + std::floor(4.0 * rng.uniform());
        if (kind == "few") x = i % 17 == 3 ? 1.0 + rng.uniform() : 0.0;
        if (kind == "spread") x = std::ldexp(1.0, -static_cast<int>(41.0 * rng.uniform()));
        if (kind == "near") x = 1.0 + 1e-12 * std::floor(1000.0 * rng.uniform());
        // one bin ([1, 1.125) in a^2), spread over its sub-bins: the split drops some of its rows
        if (kind == "sub") x = std::sqrt(1.0 + 0.12 * rng.uniform());
        a[static_cast<size_t>(i)] = x;
      }
      std::vector<double> e(a.size());
      for (size_t i = 0; i < a.size(); ++i) e[i] = a[i] * a[i];
      for (const int64_t cap : {2, 16, 40}) {
        HeavyLeverage lev(HeavyLimits{1.0, cap, 64});
        std::vector<double> out(static_cast<size_t>(n));
        lev.score(Vs, a.data(), n, r, out.data());
        EXPECT_EQ(lev.heavy_slots(), heavy_by_sorting(e, std::max(cap, r))) << "cap " << cap;
      }
    }
  }
}

}  // namespace

// SubspaceLeverage::stored_scaled keeps V Q and the row norms per slot between calls. Its
// results must not depend on that cache: a tracker told about every slot change has to produce
// exactly what a tracker that recomputes everything each call produces (each cached row comes
// from the same arithmetic as a fresh one), and a tracker left uninformed must not.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <utility>
#include <vector>

#include "core/rng.hpp"
#include "eviction/leverage.hpp"
#include "veloxquant/errors.hpp"

namespace {

using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using vq::eviction::SubspaceLeverage;

void fill_row(RowMatF& V, int64_t i, vq::Rng& rng) {
  for (int64_t d = 0; d < V.cols(); ++d)
    V(i, d) = static_cast<float>(rng.normal() / (1.0 + 0.2 * static_cast<double>(d)));
}

TEST(LeverageCache, SlotBookkeepingGivesTheSameScoresAsRecomputing) {
  vq::Rng rng(17);
  const int64_t n = 40, D = 32, rank_cap = 4;
  RowMatF V(n + 1, D);
  for (int64_t i = 0; i <= n; ++i) fill_row(V, i, rng);
  const auto solver = vq::eviction::LeverageSolver::one_iteration;
  SubspaceLeverage cached(solver), fresh(solver), uninformed(solver);
  std::vector<double> a(static_cast<size_t>(n)), lc(a.size()), lf(a.size()), lu(a.size());
  Eigen::VectorXd w(D);
  int64_t uninformed_differs = 0;
  for (int step = 0; step < 120; ++step) {
    double sum = 0;
    for (auto& x : a) sum += (x = std::exp(2.0 * rng.normal()));
    for (auto& x : a) x /= sum;
    fresh.invalidate();
    const vq::store::Fp32Rows Vs(V.data(), n, D);
    auto bc = cached.stored_scaled(Vs, a.data(), n, rank_cap, lc.data());
    auto bf = fresh.stored_scaled(Vs, a.data(), n, rank_cap, lf.data());
    auto bu = uninformed.stored_scaled(Vs, a.data(), n, rank_cap, lu.data());
    for (size_t i = 0; i < lc.size(); ++i) {
      ASSERT_EQ(lc[i], lf[i]) << "step " << step << " row " << i;
    }
    uninformed_differs += lu != lf;
    // the newcomer's seed reads the same V rows
    for (int64_t d = 0; d < D; ++d) w(d) = 0.1 * V(n, d);
    const double sc = std::move(bc).seed_scaled(0.9, w.data(), D);
    ASSERT_EQ(sc, std::move(bf).seed_scaled(0.9, w.data(), D)) << "step " << step;
    (void)std::move(bu).seed_scaled(0.9, w.data(), D);
    // CurDKV's slot changes: append at slot n, then the last row moves into an evicted slot
    fill_row(V, n, rng);
    const int64_t victim = static_cast<int64_t>(rng.below(static_cast<uint32_t>(n)));
    cached.row_replaced(n);
    fresh.row_replaced(n);
    V.row(victim) = V.row(n);
    cached.row_moved(n, victim);
    fresh.row_moved(n, victim);
    if (step % 7 == 3) {  // and now and then a row rewritten in place
      const int64_t i = static_cast<int64_t>(rng.below(static_cast<uint32_t>(n)));
      fill_row(V, i, rng);
      cached.row_replaced(i);
      fresh.row_replaced(i);
    }
    fill_row(V, n, rng);  // the next newcomer
  }
  // Without the slot reports the cached products go stale and the scores change.
  EXPECT_GT(uninformed_differs, 0);
  EXPECT_GT(cached.iterations(), 100);  // the warm (cached) path did run
}

}  // namespace

TEST(LeverageCache, ABlockSeedsOnceAndOnlyFromTheLatestCall) {
  // The decode step's order (score the kept block, then seed the newcomer from it) is carried
  // by SubspaceLeverage::Block: a stale or reused Block is refused instead of seeding from a
  // Gram matrix that no longer describes it.
  vq::Rng rng(4);
  const int64_t n = 24, D = 16, rank_cap = 3;
  for (auto solver :
       {vq::eviction::LeverageSolver::converged, vq::eviction::LeverageSolver::one_iteration}) {
    SubspaceLeverage t(solver);
    vq::eviction::SubspaceLeverage::RowMatD W(n, D);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t d = 0; d < D; ++d) W(i, d) = rng.normal();
    std::vector<double> out(static_cast<size_t>(n));
    std::vector<double> w(static_cast<size_t>(D), 0.5);
    auto first = t.stored(W, n, rank_cap, out.data());
    auto second = t.stored(W, n, rank_cap, out.data());
    EXPECT_THROW((void)std::move(first).seed_scaled(0.9, w.data(), D), vq::Error);
    const double s = std::move(second).seed_scaled(0.9, w.data(), D);
    EXPECT_GE(s, 0.0);
    EXPECT_LE(s, 1.0);
    EXPECT_THROW((void)std::move(second).seed_scaled(0.9, w.data(), D), vq::Error);
  }
  // stored_scaled is the one-iteration solver's path only.
  SubspaceLeverage converged;
  std::vector<float> V(static_cast<size_t>(n * D), 1.0f);
  std::vector<double> a(static_cast<size_t>(n), 1.0 / n), out(static_cast<size_t>(n));
  const vq::store::Fp32Rows Vs(V.data(), n, D);
  EXPECT_THROW((void)converged.stored_scaled(Vs, a.data(), n, rank_cap, out.data()), vq::Error);
}

TEST(LeverageCache, BetweenRefreshesRowsAreScoredAgainstTheLastBasis) {
  // set_refresh(R): the subspace moves on every R-th call only. In between, row i's score is
  // a_i^2 ||v_i Q||^2 / sum_j a_j^2 ||v_j||^2 with Q fixed, so score * trace / a_i^2 is a
  // per-row constant until the next iteration (or until the row's slot gets new data), and it
  // never exceeds ||v_i||^2 (a projection).
  vq::Rng rng(23);
  const int64_t n = 48, D = 32, rank_cap = 4, R = 5;
  RowMatF V(n + 1, D);
  for (int64_t i = 0; i <= n; ++i) fill_row(V, i, rng);
  SubspaceLeverage t(vq::eviction::LeverageSolver::one_iteration);
  t.set_refresh(R);
  EXPECT_EQ(t.refresh(), R);
  std::vector<double> a(static_cast<size_t>(n)), l(a.size()), proj(a.size(), -1.0);
  Eigen::VectorXd w(D);
  const int calls = 40;
  for (int step = 0; step < calls; ++step) {
    double sum = 0;
    for (auto& x : a) sum += (x = std::exp(1.5 * rng.normal()));
    for (auto& x : a) x /= sum;
    const vq::store::Fp32Rows Vs(V.data(), n, D);
    const int64_t before = t.iterations() + t.fallbacks();
    auto b = t.stored_scaled(Vs, a.data(), n, rank_cap, l.data());
    const bool moved = t.iterations() + t.fallbacks() != before;
    EXPECT_EQ(moved, step % R == 0) << "step " << step;
    double trace = 0;
    for (int64_t i = 0; i < n; ++i) trace += a[i] * a[i] * V.row(i).squaredNorm();
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double p = l[i] * trace / (a[i] * a[i]);
      EXPECT_LE(p, V.row(i).squaredNorm() * (1 + 1e-5)) << "step " << step << " row " << i;
      if (!moved && proj[i] >= 0) {
        EXPECT_NEAR(p, proj[i], 1e-5 * proj[i] + 1e-7) << "step " << step << " row " << i;
      }
      proj[i] = p;
      total += l[i];
    }
    EXPECT_LE(total, 1.0 + 1e-6);
    for (int64_t d = 0; d < D; ++d) w(d) = 0.2 * V(n, d);
    const double seed = std::move(b).seed_scaled(0.8, w.data(), D);
    EXPECT_GE(seed, 0.0);
    EXPECT_LE(seed, 1.0);
    // append at slot n, then evict a victim: the last row moves into its slot
    const int64_t victim = static_cast<int64_t>(rng.below(static_cast<uint32_t>(n)));
    t.row_replaced(n);
    V.row(victim) = V.row(n);
    t.row_moved(n, victim);
    proj[static_cast<size_t>(victim)] = -1.0;  // new data there: no earlier value to match
    fill_row(V, n, rng);
  }
  EXPECT_EQ(t.iterations() + t.fallbacks(), (calls + R - 1) / R);
  EXPECT_EQ(t.reuses(), calls - (calls + R - 1) / R);
}

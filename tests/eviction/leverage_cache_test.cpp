// SubspaceLeverage::stored_scaled keeps V Q and the row norms per slot between calls. Its
// results must not depend on that cache: a tracker told about every slot change has to produce
// exactly what a tracker that recomputes everything each call produces (each cached row comes
// from the same arithmetic as a fresh one), and a tracker left uninformed must not.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <vector>

#include "core/rng.hpp"
#include "eviction/leverage.hpp"

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
  SubspaceLeverage cached, fresh, uninformed;
  for (auto* t : {&cached, &fresh, &uninformed}) t->tracked = true;
  std::vector<double> a(static_cast<size_t>(n)), lc(a.size()), lf(a.size()), lu(a.size());
  Eigen::VectorXd w(D);
  int64_t uninformed_differs = 0;
  for (int step = 0; step < 120; ++step) {
    double sum = 0;
    for (auto& x : a) sum += (x = std::exp(2.0 * rng.normal()));
    for (auto& x : a) x /= sum;
    fresh.invalidate();
    const vq::store::Fp32Rows Vs(V.data(), n, D);
    cached.stored_scaled(Vs, a.data(), n, rank_cap, lc.data());
    fresh.stored_scaled(Vs, a.data(), n, rank_cap, lf.data());
    uninformed.stored_scaled(Vs, a.data(), n, rank_cap, lu.data());
    for (size_t i = 0; i < lc.size(); ++i) {
      ASSERT_EQ(lc[i], lf[i]) << "step " << step << " row " << i;
    }
    uninformed_differs += lu != lf;
    // the newcomer's seed reads the same V rows
    for (int64_t d = 0; d < D; ++d) w(d) = 0.1 * V(n, d);
    const double sc = cached.seed_scaled(0.9, w.data(), D, rank_cap);
    ASSERT_EQ(sc, fresh.seed_scaled(0.9, w.data(), D, rank_cap)) << "step " << step;
    uninformed.seed_scaled(0.9, w.data(), D, rank_cap);
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

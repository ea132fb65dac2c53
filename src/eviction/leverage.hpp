// Energy-weighted leverage scores of a weighted-value block W [n, D]:
//   l_i = sum_{j < r} (s_j^2 / sum_all s^2) * U_ij^2,   r = min(rank_cap, n, D)
// where W = U diag(s) V^T. Equivalently l_i = sum_{j<r} (W v_j)_i^2 / ||W||_F^2.
// The scores are in [0, 1] and sum to the share of energy in the top r directions (1 when
// r = min(n, D)). An all-zero block gives all-zero scores.
#pragma once

#include <cstdint>

namespace vq::eviction {

/// Oracle: thin SVD of W with Eigen's BDCSVD, in double. W row-major [n, D]; out[n].
void leverage_reference(const double* W, int64_t n, int64_t D, int64_t rank_cap, double* out);

/// Same quantity without an SVD: closed form ||w_i||^2 / ||W||_F^2 when r = min(n, D), otherwise
/// the smaller Gram matrix (n x n or D x D) with a symmetric eigensolver.
/// Agrees with leverage_reference to ~1e-10 absolute (scores are in [0, 1]).
void leverage_fast(const double* W, int64_t n, int64_t D, int64_t rank_cap, double* out);

}  // namespace vq::eviction

#include <Eigen/Dense>
#include <cmath>
#include <vector>

#include "veloxquant/row_source.hpp"

namespace vq::eviction {

/// out = ||b||^2 - (b . z)^2, z the unit eigenvector of the smallest eigenvalue of the symmetric
/// T (m x m, m >= 2): b's energy in the other m - 1 eigendirections, what a seed's Rayleigh-Ritz
/// needs when it drops exactly one direction. False (the caller runs a full eigensolve) on
/// anything non-finite or not positive definite after the shift. abs_tol > 0 stops the
/// eigenvalue bisection at abs_tol * ||T|| instead of full relative precision (fewer steps when
/// the smallest eigenvalue is far below the largest). Bisection starts from [0, min diagonal] of
/// the tridiagonal form, the bracket of a positive semidefinite T (the callers' Gram matrices),
/// when a Sturm count confirms it, and from Gershgorin's interval otherwise: any symmetric T works.
bool energy_outside_smallest(const Eigen::MatrixXd& T, const Eigen::VectorXd& b, double& out,
                             double abs_tol = 0.0);

/// Whether the symmetric T (m x m) has an eigenvalue at or below tol * ||T||_inf: an LDL^T
/// factorization of T - tol ||T||_inf I without pivoting meets a pivot that is not positive
/// exactly when the leading block it has reached has an eigenvalue at or below the shift, and by
/// interlacing so does T (at most m^3 / 3 multiply-adds, no eigensolve). False for a zero or
/// non-finite T.
bool smallest_below(const Eigen::MatrixXd& T, double tol);

/// Orthonormalizes Y's columns in place by Gram-Schmidt, each column orthogonalized twice (fp32
/// orthogonality to ~1e-7, like Householder, at a fraction of the cost of forming its Q). False
/// when a column keeps no more than min_ratio of its norm (Y numerically rank-deficient): Y is
/// then partly overwritten and the caller falls back to Householder on the original.
template <typename Scalar>
bool gram_schmidt_twice(Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic>& Y,
                        Scalar min_ratio = Scalar(1e-4)) {
  for (Eigen::Index j = 0; j < Y.cols(); ++j) {
    auto v = Y.col(j);
    const Scalar before = v.norm();
    for (int pass = 0; pass < 2; ++pass)
      for (Eigen::Index i = 0; i < j; ++i) v -= Y.col(i).dot(v) * Y.col(i);
    const Scalar after = v.norm();
    if (!(after > min_ratio * before && after > Scalar(0) && std::isfinite(after))) return false;
    v /= after;
  }
  return true;
}

/// Per-head fast leverage for CurDKV's decode loop.
///
/// The top-r right singular subspace of W is the top-r eigenspace of the Gram matrix
/// G = W^T W (D x D), and the energy-weighted leverage only needs that subspace:
/// l_i = ||w_i Q_r||^2 / trace(G) for any orthonormal basis Q_r of it. We form G with a
/// symmetric rank update (n D^2 / 2 multiply-adds) and track the subspace with Rayleigh-Ritz
/// subspace iteration (r + 8 oversampled columns), warm-started from the previous token's
/// subspace, iterating until every kept Ritz pair has residual ||G q - theta q|| <= tol * theta_1.
/// When r = min(n, D) no subspace is needed (closed form ||w_i||^2 / ||W||_F^2).
/// The seeding step reuses G: with the key-as-query proxy the enlarged block is [c W; w_new]
/// with c = 1 - a'_new, so G' = c^2 G + w_new w_new^T (O(D^2) instead of another pass over W).
/// How SubspaceLeverage finds the top-r subspace; fixed for a tracker's life.
enum class LeverageSolver {
  /// Iterate to the residual tolerance (agrees with the SVD oracle to ~1e-9).
  converged,
  /// One warm-started subspace iteration per call straight on W (no Gram matrix; 3 n D r
  /// multiply-adds, 2 through stored_scaled) and a Rayleigh-Ritz seed in span(Q, w_new)
  /// (O(n D)). The subspace lags the exact one by what one iteration cannot absorb; tests bound
  /// the gap. Works in fp32 (the products dominate; scores keep ~1e-6 relative accuracy).
  one_iteration,
};

/// Tolerances of the converged solver.
struct LeverageLimits {
  double tol = 1e-10;           ///< stop when every kept Ritz residual <= tol * theta_1
  int64_t max_iterations = 60;  ///< then fall back to a full eigensolve
  int64_t oversample = 8;       ///< extra subspace columns beyond r
};

class SubspaceLeverage {
 public:
  using RowMatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  explicit SubspaceLeverage(LeverageSolver solver = LeverageSolver::converged,
                            LeverageLimits limits = {})
      : solver_(solver), limits_(limits) {}
  LeverageSolver solver() const { return solver_; }

  /// One-iteration solver only: iterate the subspace on every `every`-th stored_scaled() call
  /// (1 = every call). In between, the basis stays where the last iteration left it and a call
  /// reuses the per-slot V Q rows and their squared norms, so scoring costs O(n k) on top of
  /// projecting the rows that changed; the seed still does its Rayleigh-Ritz in span(Q, w_new).
  void set_refresh(int64_t every) { refresh_ = every < 1 ? 1 : every; }
  int64_t refresh() const { return refresh_; }

  /// What a scoring call leaves behind for the newcomer's seed. The call order of a decode step
  /// is in the types: stored() / stored_scaled() score the kept block and return a Block; only a
  /// Block can seed the newcomer (`std::move(block).seed_scaled(...)`, once), and it must be
  /// used before the tracker's next scoring call (a newer call invalidates older Blocks: seeding
  /// from one throws). Between stored_scaled() and the seed, rows [0, n) of its V must not
  /// change (appending row n is fine).
  class Block {
   public:
    /// Leverage of w_new (D values) in the enlarged block [c * W; w_new], W the scored block.
    /// Exact rank-one update of that call's Gram matrix (converged solver), or a Rayleigh-Ritz
    /// step in span(Q, w_new) (one-iteration solver).
    double seed_scaled(double c, const double* w_new, int64_t D) &&;
    /// Leverage of w_new in [diag(b) V[0, n); w_new] for new per-row weights b (n values):
    /// the enlarged block when the old rows' attention is not a common rescaling of the scored
    /// one (several query heads per KV head). stored_scaled() blocks only; same Rayleigh-Ritz
    /// step in span(Q, w_new) as seed_scaled, on the per-slot V Q rows.
    double seed_reweighted(const double* b, const double* w_new, int64_t D) &&;

   private:
    friend class SubspaceLeverage;
    Block(SubspaceLeverage* owner, uint64_t call, int64_t rank_cap)
        : owner_(owner), call_(call), rank_cap_(rank_cap) {}
    SubspaceLeverage* owner_;
    uint64_t call_;
    int64_t rank_cap_;
  };

  /// Leverage of rows [0, n) of W (Eigen-owned, >= n rows, D columns) into out[n].
  [[nodiscard]] Block stored(const RowMatD& W, int64_t n, int64_t rank_cap, double* out);
  /// CurDKV's decode path: the block is W = diag(a) V[0, n) (a: n weights), never formed. With
  /// the one-iteration solver it keeps V Q (unscaled) and ||v_i||^2 per slot from the previous
  /// call, so the iteration's input W Q_prev = diag(a) (V Q_prev) costs O(n k) for the rows that
  /// did not change instead of an n x D x k product. Same quantities as stored() on the formed
  /// block, up to fp32 rounding. Slot contract: between calls the caller reports every change of
  /// V's rows with row_replaced() / row_moved(); any other change needs invalidate().
  [[nodiscard]] Block stored_scaled(const store::RowSource& V, const double* a, int64_t n,
                                    int64_t rank_cap, double* out);
  /// Row i of V now holds new data (stored_scaled recomputes its V Q row).
  void row_replaced(int64_t i);
  /// Row `from` of V moved to slot `to` (the old contents of `to` are gone).
  void row_moved(int64_t from, int64_t to);
  /// Forget the cached V Q and row norms entirely.
  void invalidate() { vq_ok_ = false; }
  /// Leverage of row n-1 of W[0, n) (general case: the Gram matrix is rebuilt). Needs no prior
  /// call; invalidates outstanding Blocks.
  double last_row(const RowMatD& W, int64_t n, int64_t rank_cap);

  /// Bytes the tracker holds (Gram matrix, subspace, per-slot V Q projections, scratch).
  int64_t bytes() const;

  int64_t iterations() const { return iterations_; }  ///< total subspace iterations so far
  int64_t reuses() const { return reuses_; }          ///< stored_scaled calls that kept the basis
  int64_t fallbacks() const {
    return fallbacks_;
  }  ///< full eigensolves (cold start/no convergence)

 private:
  bool one_iteration() const { return solver_ == LeverageSolver::one_iteration; }
  double seed_scaled(double c, const double* w_new, int64_t D, int64_t rank_cap);
  double seed_reweighted(const double* b, const double* w_new, int64_t D, int64_t rank_cap);
  // fp32 block for the one-iteration solver: rows [0, n) of block(n, D) hold W, then
  // stored_block() scores them
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& block(int64_t n,
                                                                               int64_t D);
  void stored_block(int64_t n, int64_t rank_cap, double* out);
  void score_scaled(const store::RowSource& V, const double* a, int64_t n, int64_t rank_cap,
                    double* out);
  Block issue(int64_t rank_cap) { return Block(this, ++calls_, rank_cap); }

  LeverageSolver solver_;
  LeverageLimits limits_;
  uint64_t calls_ = 0;  // scoring calls so far; a Block seeds only from the latest
  // Makes Q_ span the top eigenspace of G_ (D x D, lower triangle valid); returns columns kept.
  void track(int64_t D, int64_t r);

  double seed_tracked(double c, const double* w_new, int64_t D, int64_t r);

  Eigen::MatrixXd G_, Q_, Z_, T_;
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> Wf_;
  Eigen::MatrixXf Qf_, Pf_, Yf_;
  // stored_scaled's buffers, row-major with kp_ = k rounded up to 16 columns (zero padding):
  // Qp_ [D, kp_] = Qf_; VQ_ [rows, kp_] = V Q for the current Qf_ where vq_row_ok_ is set;
  // Pp_ [n, kp_] = W Q (then it stands in for Pf_ in seed_tracked, see p_padded_); Yp_ [D, kp_].
  std::vector<float> Qp_, VQ_, Pp_, Yp_;
  std::vector<float> af_;
  std::vector<float> vn_;        // [rows] ||V.row(i)||^2, cached with VQ_ (same validity)
  std::vector<float> qn_;        // [rows] ||VQ_.row(i)||^2, cached with VQ_ (same validity)
  int64_t refresh_ = 1;          // iterate on every refresh_-th stored_scaled call
  int64_t since_iteration_ = 0;  // stored_scaled calls since the basis last moved
  // stored_scaled between refreshes: rows [0, n) scored against the unchanged basis
  bool score_between_refreshes(const store::RowSource& V, const double* a, int64_t n, bool closed,
                               double* out);
  // stored_scaled's V (the caller's matrix object): seed_tracked reads rows [0, n_prev_) of it
  const store::RowSource* V_ = nullptr;
  std::vector<float> blk_;  // one decoded block of V
  std::vector<uint8_t> vq_row_ok_;
  int64_t kp_ = 0;
  bool vq_ok_ = false;
  bool p_padded_ = false;
  Eigen::VectorXf Wuf_;
  bool block_ready_ = false;  // Wf_/Qf_/Pf_ describe the last stored block (tracked seed)
  Eigen::VectorXd tmp_;
  int64_t n_prev_ = 0;
  double trace_prev_ = 0;
  int64_t iterations_ = 0, fallbacks_ = 0, reuses_ = 0;
};

}  // namespace vq::eviction

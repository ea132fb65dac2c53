// CurDKV's leverage from the rows that carry the energy (`solver=heavy`).
//
// The energy-weighted leverage of row i of W = diag(a) V is l_i = a_i^2 ||Q^T v_i||^2 / E with
// E = sum_j a_j^2 ||v_j||^2 and Q an orthonormal basis of the top-r eigenspace of W^T W. Attention
// is concentrated: a few rows hold nearly all of E, and they decide that eigenspace. So per call:
//   1. the heavy set T: the fewest rows, largest a_i^2 ||v_i||^2 first, that hold `mass` of E
//      (at most `max_rows`, at least r);
//   2. one warm-started subspace iteration on the heavy rows' Gram matrix, Q <- orth(W_T^T W_T Q),
//      2 t D r multiply-adds for t heavy rows instead of 2 n D r for all of them (with
//      refresh = R > 1 on every R-th call only; the calls in between score against the held Q).
//      With t = r heavy rows (the defaults: 16 and 16) that Gram matrix has rank r at most, so its
//      top-r eigenspace is the rows' own span: Q is then built from it directly, by Cholesky QR
//      of the rows in double (a row with no direction of its own replaced by the least-covered
//      axis inside the factorization; Gram-Schmidt when a row is only nearly inside the others'
//      span);
//   3. every heavy row's ||Q^T v_i||^2 recomputed against the new Q; a light row keeps the one it
//      got when last projected (its leverage is small, and it is re-projected whenever it turns
//      heavy, by a round-robin sweep that reaches every row at least once per `sweep` calls, and
//      when its slot changes);
//   4. l_i = a_i^2 ||Q^T v_i||^2 / E with E exact over every row.
// Per call: n D for the attention the caller already has, O(n) here plus t D r for the products,
// so the cost stops growing with the context at n D r. The seed (the newcomer's leverage in the
// enlarged block) is a Rayleigh-Ritz step in span(Q, u), u the newcomer's part outside Q, on the
// heavy rows plus the newcomer. Decisions track the SVD oracle's closely on real keys and values
// (tests/eviction/curdkv_real_test.cpp) without being equal to them.
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "veloxquant/row_source.hpp"

namespace vq::eviction {

/// Eight doubles, one 512-bit register (two 256-bit ones elsewhere): the orthonormalization's
/// column groups.
typedef double Lanes8 __attribute__((vector_size(64)));

/// Which rows count as heavy, and how often a light row is re-projected.
struct HeavyLimits {
  double mass = 0.99;     ///< share of the block's energy the heavy rows must hold, in (0, 1]
  int64_t max_rows = 16;  ///< cap on the heavy rows (raised to r when r is larger)
  int64_t sweep = 64;     ///< re-project ceil(n / sweep) light rows per call; 0: never
  int64_t refresh = 1;    ///< iterate the basis on every refresh-th call; held in between
};

class HeavyLeverage {
 public:
  explicit HeavyLeverage(HeavyLimits limits = {}) : lim_(limits) {}

  /// Leverage of rows [0, n) of W = diag(a) V (never formed) into out[n], for the top
  /// min(rank_cap, n, D) directions. Leaves the heavy rows for a following seed call. Slot
  /// contract: between calls the caller reports every change of V's rows with row_replaced() /
  /// row_moved(); any other change needs invalidate().
  void score(const store::RowSource& V, const double* a, int64_t n, int64_t rank_cap, double* out);
  /// Leverage of w_new (D values) in the enlarged block [c W; w_new], W the last scored block.
  double seed_scaled(double c, const double* w_new, int64_t D, int64_t rank_cap);
  /// Same for new per-row weights b (n values of the last scored block): [diag(b) V; w_new].
  double seed_reweighted(const double* b, const double* w_new, int64_t D, int64_t rank_cap);

  void row_replaced(int64_t i);              ///< row i of V holds new data
  void row_moved(int64_t from, int64_t to);  ///< row `from` moved to slot `to`
  void invalidate();                         ///< forget every cached row quantity

  int64_t bytes() const;                     ///< bytes held (per-slot caches, basis, scratch)
  int64_t heavy_rows() const { return t_; }  ///< heavy rows of the last scoring call
  /// their slots, heaviest first (a_i^2 ||v_i||^2 descending, the lower slot first on ties)
  const std::vector<int64_t>& heavy_slots() const { return T_; }
  int64_t cold_starts() const { return cold_; }
  /// seeds answered without an eigenvector step (the Ritz matrix had a near-null direction)
  int64_t seeds_near_null() const { return near_null_; }
  /// bases moved so far: warm-started iterations, and span bases (span_basis) when t == r
  int64_t iterations() const { return iters_; }
  /// span bases built by Gram-Schmidt because a heavy row was nearly, not exactly, inside the
  /// others' span
  int64_t span_fallbacks() const { return span_fallbacks_; }
  /// heavy rows with no direction of their own, replaced by an axis in a span basis that stood
  int64_t span_axes() const { return span_axes_; }

 private:
  // what a slot's cache holds
  enum : uint8_t { kNothing = 0, kNorm = 1, kProjected = 2, kQueued = 3 };
  void ensure_slots(int64_t n);
  void select_heavy(int64_t n, int64_t need, double heaviest);
  void orthonormalize(int64_t D, int64_t r);
  bool span_basis(int64_t D, int64_t r);
  void project_rows(const store::RowSource& V, const std::vector<int64_t>& slots);
  // b(j) = the new weight of heavy row j (by position in T)
  template <typename Weight>
  double seed(Weight b, double energy, const double* w_new, int64_t D, int64_t rank_cap);

  HeavyLimits lim_;
  std::vector<float> vn_;       // [slot] ||v_i||^2
  std::vector<float> qn_;       // [slot] ||Q^T v_i||^2 (basis when the row was last projected)
  std::vector<uint8_t> state_;  // [slot] kNothing / kNorm / kProjected
  std::vector<double> e_;       // [n] a_i^2 ||v_i||^2 of the last call
  std::vector<std::pair<double, int64_t>> cand_;
  std::vector<int64_t> T_;      // heavy slots of the last call, heaviest first
  std::vector<int64_t> redo_;   // slots to (re)project this call
  std::vector<int64_t> dirty_;  // slots reported changed since the last call (may repeat)
  std::vector<uint16_t> bin_;   // [n, padded to 32] select_heavy's magnitude bins
  using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  // Q_ is D x ld with ld = r_ rounded up to 16 (zero columns past r_); Pt_, Pr_, Pb_ and Y_
  // carry the same padding
  RowMatF Vt_, VtT_, Pt_, Vr_, Pr_, Q_, Y_, Pb_, PbT_, Ab_;
  // the basis's columns in double, padded to whole groups (orthonormalize's, or span_basis's rows
  // of L^-1 V_T, which the seed reads when span_ holds)
  std::vector<Lanes8> qc_;
  std::vector<double> cover_;        // per-axis coverage (and orthonormalize's coefficients)
  std::vector<double> xt_, xlen_;    // span_basis: the heavy rows transposed, their lengths^2
  std::vector<Lanes8> gram_, lcol_;  // span_basis: their Gram matrix; its Cholesky factor
  std::vector<Lanes8> wpad_;         // the seed's newcomer padded to whole groups (span_)
  Eigen::MatrixXd Tm_;               // the seed's Rayleigh-Ritz matrix
  Eigen::VectorXd wb_;
  Eigen::VectorXf at_, row_, u_, vu_, w_, wq_;
  int64_t n_ = 0, t_ = 0, r_ = 0, cursor_ = 0, cold_ = 0;
  int64_t since_ = 0;  // scoring calls since the basis last moved
  int64_t iters_ = 0;
  int64_t near_null_ = 0;
  int64_t span_fallbacks_ = 0;
  int64_t span_axes_ = 0;
  int64_t seen_ = 0;        // slots [0, seen_) have been through a scoring call
  bool all_dirty_ = false;  // invalidate(): every slot's cache is stale
  double E_ = 0;
  bool ready_ = false;  // Q_, Vt_, Pt_ describe the last scored block's heavy rows
  bool span_ = false;   // ... and Q_ is their own span's basis from span_basis (qc_ in double)
};

}  // namespace vq::eviction

#include "eviction/heavy_leverage.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "eviction/leverage.hpp"

namespace vq::eviction {

void HeavyLeverage::ensure_slots(int64_t n) {
  if (static_cast<int64_t>(state_.size()) >= n) return;
  const auto rows =
      static_cast<size_t>(std::max<int64_t>(n, 2 * static_cast<int64_t>(state_.size())));
  vn_.resize(rows, 0.0f);
  qn_.resize(rows, 0.0f);
  state_.resize(rows, kNothing);
}

void HeavyLeverage::row_replaced(int64_t i) {
  if (i < 0) return;
  if (i < static_cast<int64_t>(state_.size())) state_[static_cast<size_t>(i)] = kNothing;
  dirty_.push_back(i);
}

void HeavyLeverage::row_moved(int64_t from, int64_t to) {
  const auto n = static_cast<int64_t>(state_.size());
  if (to < 0 || to >= n) return;
  const auto t = static_cast<size_t>(to);
  dirty_.push_back(to);
  if (from < 0 || from >= n) {
    state_[t] = kNothing;
    return;
  }
  const auto f = static_cast<size_t>(from);
  vn_[t] = vn_[f];
  qn_[t] = qn_[f];
  state_[t] = state_[f];
  state_[f] = kNothing;
  dirty_.push_back(from);
}

void HeavyLeverage::invalidate() {
  all_dirty_ = true;
  ready_ = false;
}

void HeavyLeverage::project_rows(const store::RowSource& V, const std::vector<int64_t>& slots) {
  const int64_t D = Q_.rows();
  const auto m = static_cast<int64_t>(slots.size());
  if (m == 0) return;
  Vr_.resize(m, D);
  for (int64_t j = 0; j < m; ++j) V.read(slots[static_cast<size_t>(j)], 1, Vr_.data() + j * D);
  Pr_.noalias() = Vr_ * Q_;
  for (int64_t j = 0; j < m; ++j) {
    const auto i = static_cast<size_t>(slots[static_cast<size_t>(j)]);
    vn_[i] = Vr_.row(j).squaredNorm();
    qn_[i] = Pr_.row(j).squaredNorm();
    state_[i] = kProjected;
  }
}

// T_ = the heaviest rows (a_i^2 ||v_i||^2 descending, slot ascending on ties) until they hold
// `mass` of E, at least `need` and at most cap = max(max_rows, need) of them. The candidates are
// found without sorting all n: rows are binned by how far below the heaviest they sit, in eighths
// of a binary order of magnitude (the exponent and top 3 mantissa bits of the double, which order
// positive doubles), and bins are taken from the top until they hold cap rows; a crowded last bin
// is split again by the next 8 mantissa bits; only the rows above the split are ranked. Rows more
// than 2^-32 below the heaviest (less than 1e-9 of it each) count as weightless: when some of
// them are needed to reach `need`, the lowest slots are taken.
void HeavyLeverage::select_heavy(int64_t n, int64_t need, double heaviest) {
  const auto cap = std::min<int64_t>(n, std::max(lim_.max_rows, need));
  constexpr int kBins = 256;  // 32 octaves, then the weightless bin
  constexpr int kWeightless = kBins;
  const auto bits_of = [](double x) {
    uint64_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    return bits;
  };
  const auto top = static_cast<int64_t>(bits_of(heaviest) >> 49);
  // four interleaved histograms: consecutive rows in one bin do not wait on each other's count
  std::array<std::array<int32_t, kBins + 1>, 4> hist{};
  bin_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const auto key = static_cast<int64_t>(bits_of(e_[static_cast<size_t>(i)]) >> 49);
    const auto b = static_cast<int>(std::min<int64_t>(kWeightless, top - key));
    bin_[static_cast<size_t>(i)] = static_cast<uint16_t>(b);
    hist[static_cast<size_t>(i & 3)][static_cast<size_t>(b)] += 1;
  }
  const auto count = [&](int b) {
    const auto k = static_cast<size_t>(b);
    return static_cast<int64_t>(hist[0][k]) + hist[1][k] + hist[2][k] + hist[3][k];
  };
  int cut = kWeightless;
  int64_t above = 0;  // rows in the bins before `cut`
  for (int b = 0; b < kWeightless; ++b) {
    const int64_t c = count(b);
    if (above + c >= cap) {
      cut = b;
      break;
    }
    above += c;
  }
  int sub = 0;  // rows of the cut bin from this sub-bin up are candidates
  if (cut < kWeightless && count(cut) > 2 * (cap - above)) {
    std::array<int32_t, 256> h2{};
    for (int64_t i = 0; i < n; ++i)
      if (bin_[static_cast<size_t>(i)] == cut)
        h2[(bits_of(e_[static_cast<size_t>(i)]) >> 41) & 0xff] += 1;
    int64_t held = above;
    for (int v = 255; v >= 0; --v) {
      held += h2[static_cast<size_t>(v)];
      if (held >= cap) {
        sub = v;
        break;
      }
    }
  }
  cand_.clear();
  for (int64_t i = 0; i < n; ++i) {
    const int b = bin_[static_cast<size_t>(i)];
    if (b < cut || (b == cut && cut < kWeightless &&
                    static_cast<int>((bits_of(e_[static_cast<size_t>(i)]) >> 41) & 0xff) >= sub))
      cand_.emplace_back(e_[static_cast<size_t>(i)], i);
  }
  const auto heavier = [](const std::pair<double, int64_t>& x,
                          const std::pair<double, int64_t>& y) {
    return x.first > y.first || (x.first == y.first && x.second < y.second);
  };
  if (static_cast<int64_t>(cand_.size()) > cap) {
    std::nth_element(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(cap), cand_.end(),
                     heavier);
    cand_.resize(static_cast<size_t>(cap));
  }
  std::sort(cand_.begin(), cand_.end(), heavier);
  for (int64_t i = 0; i < n && cut == kWeightless && static_cast<int64_t>(cand_.size()) < cap; ++i)
    if (bin_[static_cast<size_t>(i)] == kWeightless)
      cand_.emplace_back(e_[static_cast<size_t>(i)], i);
  T_.clear();
  const double target = lim_.mass * E_;
  double held = 0;
  for (const auto& c : cand_) {
    T_.push_back(c.second);
    held += c.first;
    if (lim_.mass < 1.0 && static_cast<int64_t>(T_.size()) >= need && held >= target) break;
  }
}

// Y <- an orthonormal basis of span(Y) by CholeskyQR twice (Y R^-1 with R^T R = Y^T Y, then
// again for the orthogonality the first pass loses to Y's conditioning): two small products and
// triangular solves, in double. False when Y is too ill-conditioned for it (the caller uses
// Householder instead).
bool HeavyLeverage::cholesky_qr2(Eigen::MatrixXd& Y) {
  // Y = (Gram) Q has columns of very different lengths (the Gram matrix's eigenvalues); unit
  // columns leave only the angles between them in its condition number
  for (Eigen::Index j = 0; j < Y.cols(); ++j) {
    const double norm = Y.col(j).norm();
    if (!(norm > 0) || !std::isfinite(norm)) return false;
    Y.col(j) /= norm;
  }
  for (int pass = 0; pass < 2; ++pass) {
    C_.noalias() = Y.transpose() * Y;
    Eigen::LLT<Eigen::MatrixXd> llt(C_);
    if (llt.info() != Eigen::Success) return false;
    const auto R = llt.matrixU();
    const Eigen::VectorXd d = llt.matrixLLT().diagonal();
    if (!(d.minCoeff() > 1e-7 * d.maxCoeff()) || !std::isfinite(d.maxCoeff())) return false;
    // Y R^-1 as one product with the small inverse (Eigen's right-hand triangular solve is
    // slower at these sizes)
    Rinv_.setIdentity(Y.cols(), Y.cols());
    R.solveInPlace(Rinv_);
    Yt_.noalias() = Y * Rinv_.triangularView<Eigen::Upper>();
    Y.swap(Yt_);
  }
  return true;
}

void HeavyLeverage::score(const store::RowSource& V, const double* a, int64_t n, int64_t rank_cap,
                          double* out) {
  const int64_t D = V.dim();
  n_ = n;
  t_ = 0;
  E_ = 0;
  ready_ = false;
  if (n <= 0) return;
  ensure_slots(n);
  row_.resize(D);
  // the slots whose cache may be stale: reported changes, slots never seen, or all of them
  if (all_dirty_) {
    std::fill(state_.begin(), state_.end(), kNothing);
    dirty_.clear();
    for (int64_t i = 0; i < n; ++i) dirty_.push_back(i);
    all_dirty_ = false;
  } else {
    for (int64_t i = seen_; i < n; ++i) dirty_.push_back(i);
  }
  seen_ = std::max(seen_, n);
  for (const int64_t i : dirty_) {
    if (i >= n || state_[static_cast<size_t>(i)] != kNothing) continue;
    V.read(i, 1, row_.data());
    vn_[static_cast<size_t>(i)] = row_.squaredNorm();
    state_[static_cast<size_t>(i)] = kNorm;
  }
  // E and the heaviest row in four interleaved partial results (a fixed order, so the same bits
  // on every run; one serial chain of n dependent adds would be several times slower)
  e_.resize(static_cast<size_t>(n));
  double part[4] = {0, 0, 0, 0}, top[4] = {0, 0, 0, 0};
  const float* vn = vn_.data();
  double* ev = e_.data();
  int64_t i0 = 0;
  for (; i0 + 4 <= n; i0 += 4)
    for (int j = 0; j < 4; ++j) {
      const double e = a[i0 + j] * a[i0 + j] * static_cast<double>(vn[i0 + j]);
      ev[i0 + j] = e;
      part[j] += e;
      top[j] = std::max(top[j], e);
    }
  for (int j = 0; i0 + j < n; ++j) {
    const double e = a[i0 + j] * a[i0 + j] * static_cast<double>(vn[i0 + j]);
    ev[i0 + j] = e;
    part[j] += e;
    top[j] = std::max(top[j], e);
  }
  E_ = (part[0] + part[1]) + (part[2] + part[3]);
  const double heaviest = std::max(std::max(top[0], top[1]), std::max(top[2], top[3]));
  Eigen::Map<Eigen::VectorXd> l(out, n);
  if (!(E_ > 0)) {
    l.setZero();
    return;
  }
  const int64_t rank = std::min<int64_t>({rank_cap, n, D});
  const bool closed = rank == std::min(n, D);
  if (closed) {  // every direction kept: ||w_i||^2 / ||W||_F^2
    for (int64_t i = 0; i < n; ++i) l(i) = e_[static_cast<size_t>(i)] / E_;
    // the enlarged block may still need a subspace (n == rank_cap < D): then the basis spans
    // every row, from an exact eigensolve below
    if (std::min<int64_t>({rank_cap, n + 1, D}) == std::min(n + 1, D)) return;
  }
  select_heavy(n, closed ? n : rank, heaviest);
  const auto t = static_cast<int64_t>(T_.size());
  Vt_.resize(t, D);
  at_.resize(t);
  for (int64_t j = 0; j < t; ++j) {
    V.read(T_[static_cast<size_t>(j)], 1, Vt_.data() + j * D);
    at_(j) = static_cast<float>(a[T_[static_cast<size_t>(j)]]);
  }
  if (closed || Q_.rows() != D || Q_.cols() != rank) {
    // cold start: the exact top eigenspace of the heavy rows' Gram matrix, once
    const Eigen::MatrixXd W = (at_.asDiagonal() * Vt_).cast<double>();
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(W.transpose() * W);
    Q_ = es.eigenvectors().rightCols(rank).rowwise().reverse().cast<float>();
    ++cold_;
  } else {
    // one warm-started iteration: Q <- orth(V_T^T diag(a_T^2) V_T Q)
    Pt_.noalias() = Vt_ * Q_;
    Pt_ = at_.cwiseAbs2().asDiagonal() * Pt_;
    Y_.noalias() = Vt_.transpose() * Pt_;
    // orthonormalized in double: the heavy rows' Gram matrix often spans more orders of
    // magnitude than fp32 Gram-Schmidt can separate
    Yd_ = Y_.cast<double>();
    if (cholesky_qr2(Yd_)) {
      Q_ = Yd_.cast<float>();
    } else {  // numerically rank-deficient: Householder completes the basis
      Y_.noalias() = Vt_.transpose() * Pt_;
      Eigen::HouseholderQR<Eigen::MatrixXf> qr(Y_);
      Q_ = qr.householderQ() * Eigen::MatrixXf::Identity(D, rank);
    }
  }
  Pt_.noalias() = Vt_ * Q_;  // the heavy rows against the new basis (also the seed's input)
  for (int64_t j = 0; j < t; ++j) {
    const auto i = static_cast<size_t>(T_[static_cast<size_t>(j)]);
    vn_[i] = Vt_.row(j).squaredNorm();
    qn_[i] = Pt_.row(j).squaredNorm();
    state_[i] = kProjected;
  }
  // rows to (re)project: a few light rows per call, round robin, and every row without one
  redo_.clear();
  if (lim_.sweep > 0) {
    const int64_t m = std::min(n, (n + lim_.sweep - 1) / lim_.sweep);
    for (int64_t s = 0; s < m; ++s) {
      const int64_t i = (cursor_ + s) % n;
      if (state_[static_cast<size_t>(i)] == kProjected) redo_.push_back(i);
    }
    cursor_ = (cursor_ + m) % n;
  }
  for (const int64_t i : dirty_) {
    if (i >= n || state_[static_cast<size_t>(i)] == kProjected ||
        state_[static_cast<size_t>(i)] == kQueued)
      continue;
    state_[static_cast<size_t>(i)] = kQueued;  // listed once even if reported twice
    redo_.push_back(i);
  }
  dirty_.clear();
  project_rows(V, redo_);
  if (!closed) {
    const double inv = 1.0 / E_;
    for (int64_t i = 0; i < n; ++i)
      l(i) = a[i] * a[i] * static_cast<double>(qn_[static_cast<size_t>(i)]) * inv;
  }
  t_ = t;
  ready_ = true;
}

double HeavyLeverage::seed_scaled(double c, const double* w_new, int64_t D, int64_t rank_cap) {
  const double c2 = c * c;
  return seed([&](int64_t j) { return static_cast<float>(c) * at_(j); }, c2 * E_, w_new, D,
              rank_cap);
}

double HeavyLeverage::seed_reweighted(const double* b, const double* w_new, int64_t D,
                                      int64_t rank_cap) {
  double energy = 0;
  for (int64_t i = 0; i < n_; ++i)
    energy += b[i] * b[i] * static_cast<double>(vn_[static_cast<size_t>(i)]);
  return seed([&](int64_t j) { return static_cast<float>(b[T_[static_cast<size_t>(j)]]); }, energy,
              w_new, D, rank_cap);
}

// Rayleigh-Ritz of G' = W_T'^T W_T' + w w^T (W_T' the heavy rows under their new weights) on
// B = [Q, u], u the unit part of w outside span(Q); the newcomer's leverage is the energy of
// B^T w in the top r Ritz directions over the enlarged block's whole energy.
template <typename Weight>
double HeavyLeverage::seed(Weight b, double energy, const double* w_new, int64_t D,
                           int64_t rank_cap) {
  const Eigen::Map<const Eigen::VectorXd> wd(w_new, D);
  const double wn2 = wd.squaredNorm();
  const double total = energy + wn2;
  if (!(total > 0)) return 0.0;
  const int64_t n = n_;
  // every direction of the enlarged block kept, or no energy in the old rows to compete with
  if (std::min<int64_t>({rank_cap, n + 1, D}) == std::min(n + 1, D) || !ready_) return wn2 / total;
  const int64_t r = Q_.cols();
  const auto t = static_cast<int64_t>(T_.size());
  const Eigen::VectorXf w = wd.cast<float>();
  const Eigen::VectorXf wq = Q_.transpose() * w;
  u_ = w - Q_ * wq;
  const float un = u_.norm();
  const bool extend = un > 1e-6f * std::sqrt(static_cast<float>(wn2));
  const int64_t m = r + (extend ? 1 : 0);
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> Pb(t, r);
  for (int64_t j = 0; j < t; ++j) Pb.row(j) = b(j) * Pt_.row(j);
  Eigen::MatrixXd Tm(m, m);
  Tm.topLeftCorner(r, r) = (Pb.transpose() * Pb).cast<double>();
  Eigen::VectorXd wb(m);
  wb.head(r) = wq.cast<double>();
  if (extend) {
    u_ /= un;
    vu_.noalias() = Vt_ * u_;
    for (int64_t j = 0; j < t; ++j) vu_(j) *= b(j);
    Tm.topRightCorner(r, 1) = (Pb.transpose() * vu_).cast<double>();
    Tm.bottomLeftCorner(1, r) = Tm.topRightCorner(r, 1).transpose();
    Tm(r, r) = static_cast<double>(vu_.squaredNorm());
    wb(r) = static_cast<double>(w.dot(u_));
  }
  Tm.noalias() += wb * wb.transpose();
  if (m <= r) return wb.squaredNorm() / total;  // nothing to drop
  double kept = 0;
  if (energy_outside_smallest(Tm, wb, kept, 1e-6)) return kept / total;
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(Tm);
  return (wb.transpose() * es.eigenvectors().rightCols(r)).squaredNorm() / total;
}

int64_t HeavyLeverage::bytes() const {
  const auto v = [](const auto& x) {
    return static_cast<int64_t>(x.capacity() *
                                sizeof(typename std::decay_t<decltype(x)>::value_type));
  };
  const auto e = [](const auto& x) {
    return static_cast<int64_t>(x.size()) * static_cast<int64_t>(sizeof(float));
  };
  return v(vn_) + v(qn_) + v(state_) + v(e_) + v(cand_) + v(T_) + v(redo_) + v(dirty_) + v(bin_) +
         static_cast<int64_t>((Yd_.size() + C_.size() + Rinv_.size() + Yt_.size()) *
                              sizeof(double)) +
         e(Vt_) + e(Pt_) + e(Vr_) + e(Pr_) + e(Q_) + e(Y_) + e(at_) + e(row_) + e(u_) + e(vu_);
}

}  // namespace vq::eviction

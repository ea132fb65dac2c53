#include "eviction/heavy_leverage.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "eviction/leverage.hpp"

namespace vq::eviction {
namespace {

// The basis and every product against it are stored with their r columns padded to a multiple
// of kLanes (zeros beyond r), so the products below run on whole 16-float groups held in
// registers: at this solver's sizes (t <= 32 rows, r <= 16, D <= 128) a general GEMM spends more
// on packing and dispatch than on arithmetic.
constexpr int64_t kLanes = 16;

int64_t padded(int64_t r) {
  return (r + kLanes - 1) / kLanes * kLanes;
}

// out[j * ldb + c] = sum_d A[j * D + d] * B[d * ldb + c] for j < m, c < ldb (a multiple of
// kLanes): each output one chain over d in ascending order, whatever m or the grouping of rows.
void times_basis(const float* __restrict A, int64_t m, int64_t D, const float* __restrict B,
                 int64_t ldb, float* __restrict out) {
  for (int64_t c0 = 0; c0 < ldb; c0 += kLanes) {
    int64_t j = 0;
    for (; j + 4 <= m; j += 4) {  // four rows per pass: four independent chains
      float s0[kLanes] = {}, s1[kLanes] = {}, s2[kLanes] = {}, s3[kLanes] = {};
      const float* a = A + j * D;
      for (int64_t d = 0; d < D; ++d) {
        const float* b = B + d * ldb + c0;
        const float x0 = a[d], x1 = a[D + d], x2 = a[2 * D + d], x3 = a[3 * D + d];
        for (int64_t c = 0; c < kLanes; ++c) {
          s0[c] += x0 * b[c];
          s1[c] += x1 * b[c];
          s2[c] += x2 * b[c];
          s3[c] += x3 * b[c];
        }
      }
      std::copy_n(s0, kLanes, out + j * ldb + c0);
      std::copy_n(s1, kLanes, out + (j + 1) * ldb + c0);
      std::copy_n(s2, kLanes, out + (j + 2) * ldb + c0);
      std::copy_n(s3, kLanes, out + (j + 3) * ldb + c0);
    }
    for (; j < m; ++j) {
      float s0[kLanes] = {};
      const float* a = A + j * D;
      for (int64_t d = 0; d < D; ++d) {
        const float* b = B + d * ldb + c0;
        const float x0 = a[d];
        for (int64_t c = 0; c < kLanes; ++c) s0[c] += x0 * b[c];
      }
      std::copy_n(s0, kLanes, out + j * ldb + c0);
    }
  }
}

// x . y in eight interleaved partial sums (one vector register's lanes), combined in a fixed
// order: the same bits on every call, without one serial chain of n dependent adds.
double lanes_sum(const double (&acc)[8]) {
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

double dot(const double* __restrict x, const double* __restrict y, int64_t n) {
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += x[i + l] * y[i + l];
  double s = lanes_sum(acc);
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

// One classical Gram-Schmidt pass: x -= sum_p (q_p . x) q_p over q_0 .. q_{k-1} (rows of Qc, each
// D long), all k coefficients taken from the same x (two matrix-vector products, unlike the
// modified form's chain of dependent dots); h holds k of them.
void project_out(const double* Qc, int64_t k, int64_t D, double* x, double* h) {
  if (k == 0) return;
  using RowMatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMatD> Q(Qc, k, D);
  Eigen::Map<Eigen::VectorXd> xv(x, D), hv(h, k);
  hv.noalias() = Q * xv;
  xv.noalias() -= Q.transpose() * hv;
}

}  // namespace

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
  Pr_.resize(m, Q_.cols());
  times_basis(Vr_.data(), m, D, Q_.data(), Q_.cols(), Pr_.data());
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

// Q_ <- an orthonormal basis of the span of Y_'s first r columns: classical Gram-Schmidt in double,
// a second pass for a column that lost more than half its energy in the first (it restores the
// orthogonality the first loses when a column is nearly dependent on the earlier ones), on unit
// columns (Y = Gram Q has columns of very different lengths). A column with nothing left after the
// passes (under 1e-7 of its length: Y is numerically rank-deficient, e.g. when a few rows hold all
// the weight) is replaced by the coordinate axis the basis so far covers least, so the basis always
// has r columns.
void HeavyLeverage::orthonormalize(int64_t D, int64_t r) {
  const int64_t ld = Y_.cols();
  qc_.assign(static_cast<size_t>(r * D + r + D), 0.0);
  double* h = qc_.data() + r * D;
  double* cover = h + r;  // [D] sum over the columns so far of their squared entries
  for (int64_t c = 0; c < r; ++c) {
    double* x = qc_.data() + c * D;
    for (int64_t d = 0; d < D; ++d) x[d] = static_cast<double>(Y_(d, c));
    const double n0 = std::sqrt(dot(x, x, D));
    bool ok = n0 > 0 && std::isfinite(n0);
    if (ok) {
      for (int64_t d = 0; d < D; ++d) x[d] /= n0;
      project_out(qc_.data(), c, D, x, h);
      double n1 = std::sqrt(dot(x, x, D));
      // a second pass only when the first removed more than half of the column's energy (Kahan's
      // criterion: a column that kept more lost no orthogonality to cancellation)
      if (!(n1 > std::sqrt(0.5))) {
        project_out(qc_.data(), c, D, x, h);
        n1 = std::sqrt(dot(x, x, D));
      }
      ok = n1 > 1e-7 && std::isfinite(n1);
      if (ok)
        for (int64_t d = 0; d < D; ++d) x[d] /= n1;
    }
    if (!ok) {
      int64_t axis = 0;
      for (int64_t d = 1; d < D; ++d)
        if (cover[d] < cover[axis]) axis = d;
      std::fill(x, x + D, 0.0);
      x[axis] = 1.0;  // c < D columns cover at most c / D < 1 of the axes' total on average
      project_out(qc_.data(), c, D, x, h);
      project_out(qc_.data(), c, D, x, h);
      const double n1 = std::sqrt(dot(x, x, D));
      for (int64_t d = 0; d < D; ++d) x[d] /= n1;
    }
    for (int64_t d = 0; d < D; ++d) cover[d] += x[d] * x[d];
  }
  Q_.setZero(D, ld);
  for (int64_t d = 0; d < D; ++d)
    for (int64_t c = 0; c < r; ++c)
      Q_(d, c) = static_cast<float>(qc_[static_cast<size_t>(c * D + d)]);
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
  const int64_t ld = padded(rank);
  Pt_.resize(t, ld);
  if (closed || Q_.rows() != D || r_ != rank) {
    // cold start: the exact top eigenspace of the heavy rows' Gram matrix, once
    const Eigen::MatrixXd W = (at_.asDiagonal() * Vt_).cast<double>();
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(W.transpose() * W);
    Q_.setZero(D, ld);
    Q_.leftCols(rank) = es.eigenvectors().rightCols(rank).rowwise().reverse().cast<float>();
    r_ = rank;
    ++cold_;
    since_ = 0;
  } else if (++since_ >= lim_.refresh) {
    since_ = 0;
    ++iters_;
    // one warm-started iteration: Q <- orth(V_T^T diag(a_T^2) V_T Q)
    times_basis(Vt_.data(), t, D, Q_.data(), ld, Pt_.data());
    for (int64_t j = 0; j < t; ++j) Pt_.row(j) *= at_(j) * at_(j);
    VtT_ = Vt_.transpose();
    Y_.resize(D, ld);
    times_basis(VtT_.data(), D, t, Pt_.data(), ld, Y_.data());
    // orthonormalized in double: the heavy rows' Gram matrix often spans more orders of
    // magnitude than fp32 Gram-Schmidt can separate
    orthonormalize(D, rank);
  }
  // the heavy rows against the new basis (also the seed's input)
  times_basis(Vt_.data(), t, D, Q_.data(), ld, Pt_.data());
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
  const int64_t r = r_, ld = Q_.cols();
  const auto t = static_cast<int64_t>(T_.size());
  w_ = wd.cast<float>();
  wq_.resize(ld);
  times_basis(w_.data(), 1, D, Q_.data(), ld, wq_.data());
  u_.resize(D);
  for (int64_t d = 0; d < D; ++d) {
    float s = 0;
    for (int64_t c = 0; c < ld; ++c) s += Q_(d, c) * wq_(c);
    u_(d) = w_(d) - s;
  }
  const float un = u_.norm();
  const bool extend = un > 1e-6f * std::sqrt(static_cast<float>(wn2));
  const int64_t m = r + (extend ? 1 : 0);
  Pb_.resize(t, ld);
  for (int64_t j = 0; j < t; ++j) Pb_.row(j) = b(j) * Pt_.row(j);
  PbT_ = Pb_.transpose();
  Ab_.resize(ld, ld);
  times_basis(PbT_.data(), r, t, Pb_.data(), ld, Ab_.data());
  Eigen::MatrixXd& Tm = Tm_;
  Tm.resize(m, m);
  Tm.topLeftCorner(r, r) = Ab_.topLeftCorner(r, r).cast<double>();
  Eigen::VectorXd& wb = wb_;
  wb.resize(m);
  wb.head(r) = wq_.head(r).cast<double>();
  if (extend) {
    u_ /= un;
    vu_.resize(t);
    for (int64_t j = 0; j < t; ++j) vu_(j) = b(j) * Vt_.row(j).dot(u_.transpose());
    wq_.setZero();  // reused: Pb^T vu
    times_basis(vu_.data(), 1, t, Pb_.data(), ld, wq_.data());
    Tm.topRightCorner(r, 1) = wq_.head(r).cast<double>();
    Tm.bottomLeftCorner(1, r) = Tm.topRightCorner(r, 1).transpose();
    Tm(r, r) = static_cast<double>(vu_.squaredNorm());
    wb(r) = static_cast<double>(w_.dot(u_));
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
         v(qc_) + static_cast<int64_t>((Tm_.size() + wb_.size()) * sizeof(double)) + e(Vt_) +
         e(VtT_) + e(Pt_) + e(Vr_) + e(Pr_) + e(Q_) + e(Y_) + e(Pb_) + e(PbT_) + e(Ab_) + e(at_) +
         e(row_) + e(u_) + e(vu_) + e(w_) + e(wq_);
}

}  // namespace vq::eviction

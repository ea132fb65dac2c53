#include "eviction/leverage.hpp"

#include "eviction/eviction_cache.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "veloxquant/errors.hpp"

namespace vq::eviction {

using MapW =
    Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

void leverage_reference(const double* W, int64_t n, int64_t D, int64_t rank_cap, double* out) {
  if (n <= 0) return;
  MapW w(W, n, D);
  Eigen::Map<Eigen::VectorXd> l(out, n);
  const double total = w.squaredNorm();
  if (!(total > 0)) {
    l.setZero();
    return;
  }
  Eigen::BDCSVD<Eigen::MatrixXd> svd(w, Eigen::ComputeThinU);
  const auto& s = svd.singularValues();
  const int64_t r = std::min<int64_t>({rank_cap, n, D});
  l.setZero();
  for (int64_t j = 0; j < r; ++j) {
    const double weight = s(j) * s(j) / total;
    l += weight * svd.matrixU().col(j).cwiseAbs2();
  }
}

void leverage_fast(const double* W, int64_t n, int64_t D, int64_t rank_cap, double* out) {
  if (n <= 0) return;
  MapW w(W, n, D);
  Eigen::Map<Eigen::VectorXd> l(out, n);
  const double total = w.squaredNorm();
  if (!(total > 0)) {
    l.setZero();
    return;
  }
  const int64_t m = std::min(n, D);
  const int64_t r = std::min(rank_cap, m);
  if (r == m) {  // every direction kept: the energy weights sum the full row norms
    l = w.rowwise().squaredNorm() / total;
    return;
  }
  if (n <= D) {
    Eigen::MatrixXd G = w * w.transpose();  // n x n, eigenvectors are U
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(G);
    l.setZero();
    for (int64_t j = 0; j < r; ++j) {  // eigenvalues ascending: take the last r
      const int64_t c = n - 1 - j;
      l += std::max(es.eigenvalues()(c), 0.0) * es.eigenvectors().col(c).cwiseAbs2();
    }
    l /= total;
  } else {
    Eigen::MatrixXd G = w.transpose() * w;  // D x D, eigenvectors are V
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(G);
    Eigen::MatrixXd Vr = es.eigenvectors().rightCols(r);
    l = (w * Vr).rowwise().squaredNorm() / total;
  }
}

}  // namespace vq::eviction

namespace vq::eviction {

void SubspaceLeverage::track(int64_t D, int64_t r) {
  const int64_t k = std::min<int64_t>(D, r + limits_.oversample);
  auto Gs = G_.selfadjointView<Eigen::Lower>();
  if (Q_.rows() != D || Q_.cols() != k) {  // cold start: one exact eigensolve
    Eigen::MatrixXd full = Gs;
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(full);
    Q_ = es.eigenvectors().rightCols(k).rowwise().reverse();
    ++fallbacks_;
    return;
  }
  for (int64_t it = 0; it < limits_.max_iterations; ++it) {
    ++iterations_;
    Z_.noalias() = Gs * Q_;              // D x k
    T_.noalias() = Q_.transpose() * Z_;  // k x k Rayleigh quotient
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(T_);
    // descending Ritz values
    const Eigen::MatrixXd U = es.eigenvectors().rowwise().reverse();
    const Eigen::VectorXd theta = es.eigenvalues().reverse();
    Q_ = Q_ * U;
    Z_ = Z_ * U;
    const double scale = std::max(theta(0), 1e-300);
    double worst = 0;
    for (int64_t j = 0; j < r; ++j)
      worst = std::max(worst, (Z_.col(j) - theta(j) * Q_.col(j)).norm());
    if (worst <= limits_.tol * scale) return;
    // next iterate: orthonormal basis of G Q
    Eigen::HouseholderQR<Eigen::MatrixXd> qr(Z_);
    Q_ = qr.householderQ() * Eigen::MatrixXd::Identity(D, k);
  }
  // no convergence: exact eigensolve (counts as a fallback)
  Eigen::MatrixXd full = Gs;
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(full);
  Q_ = es.eigenvectors().rightCols(k).rowwise().reverse();
  ++fallbacks_;
}

SubspaceLeverage::Block SubspaceLeverage::stored(const RowMatD& W, int64_t n, int64_t rank_cap,
                                                 double* out) {
  const int64_t D = W.cols();
  if (one_iteration()) {  // one code path for the one-iteration solver: the fp32 block
    if (n > 0) block(n, D).topRows(n) = W.topRows(n).cast<float>();
    stored_block(n, rank_cap, out);
    return issue(rank_cap);
  }
  n_prev_ = n;
  if (n <= 0) return issue(rank_cap);
  auto Wn = W.topRows(n);
  Eigen::Map<Eigen::VectorXd> l(out, n);
  const int64_t r = std::min<int64_t>({rank_cap, n, D});
  if (r == std::min(n, D)) {
    // closed form; keep the Gram current for a following seed_scaled()
    if (tmp_.size() < n) tmp_.resize(std::max<int64_t>(n, 2 * tmp_.size()));
    auto norms = tmp_.head(n);
    norms = Wn.rowwise().squaredNorm();
    trace_prev_ = norms.sum();
    if (!(trace_prev_ > 0)) {
      l.setZero();
    } else {
      l = norms / trace_prev_;
    }
    // The enlarged block (n + 1 rows) may need the subspace even though this one did not.
    if (std::min<int64_t>({rank_cap, n + 1, D}) != std::min<int64_t>(n + 1, D)) {
      G_.setZero(D, D);
      G_.selfadjointView<Eigen::Lower>().rankUpdate(Wn.transpose());
    } else {
      G_.resize(0, 0);
    }
    return issue(rank_cap);
  }
  G_.setZero(D, D);
  G_.selfadjointView<Eigen::Lower>().rankUpdate(Wn.transpose());
  trace_prev_ = G_.diagonal().sum();
  if (!(trace_prev_ > 0)) {
    l.setZero();
    return issue(rank_cap);
  }
  track(D, r);
  if (tmp_.size() < n) tmp_.resize(std::max<int64_t>(n, 2 * tmp_.size()));
  l = (Wn * Q_.leftCols(r)).rowwise().squaredNorm() / trace_prev_;
  return issue(rank_cap);
}

double SubspaceLeverage::Block::seed_scaled(double c, const double* w_new, int64_t D) && {
  VQ_CHECK(owner_ != nullptr && call_ == owner_->calls_, Error,
           "SubspaceLeverage: a Block was used after a newer scoring call (or twice)");
  SubspaceLeverage& t = *owner_;
  ++t.calls_;  // a Block seeds once
  owner_ = nullptr;
  return t.seed_scaled(c, w_new, D, rank_cap_);
}

double SubspaceLeverage::Block::seed_reweighted(const double* b, const double* w_new,
                                                int64_t D) && {
  VQ_CHECK(owner_ != nullptr && call_ == owner_->calls_, Error,
           "SubspaceLeverage: a Block was used after a newer scoring call (or twice)");
  SubspaceLeverage& t = *owner_;
  ++t.calls_;
  owner_ = nullptr;
  return t.seed_reweighted(b, w_new, D, rank_cap_);
}

double SubspaceLeverage::seed_reweighted(const double* b, const double* w_new, int64_t D,
                                         int64_t rank_cap) {
  VQ_CHECK(V_ != nullptr, Error,
           "SubspaceLeverage::seed_reweighted needs the block of a preceding stored_scaled()");
  const int64_t n = n_prev_;  // vn_[0, n) is current after any stored_scaled() with n > 0
  // The old rows keep their slots and V Q rows; only their weights change: W = diag(b) V.
  double trace = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float bi = static_cast<float>(b[i]);
    af_[static_cast<size_t>(i)] = bi;
    trace += static_cast<double>(bi * bi) * static_cast<double>(vn_[static_cast<size_t>(i)]);
  }
  trace_prev_ = trace;
  if (!(trace > 0)) {  // the old rows carry no energy: w_new is the block's only direction
    const double wn2 = Eigen::Map<const Eigen::VectorXd>(w_new, D).squaredNorm();
    return wn2 > 0 ? 1.0 : 0.0;
  }
  if (block_ready_ && p_padded_) {
    for (int64_t i = 0; i < n; ++i) {
      const float bi = af_[static_cast<size_t>(i)];
      const float* vq = VQ_.data() + i * kp_;
      float* p = Pp_.data() + i * kp_;
      for (int64_t j = 0; j < kp_; ++j) p[j] = bi * vq[j];
    }
  }
  return seed_scaled(1.0, w_new, D, rank_cap);
}

double SubspaceLeverage::seed_scaled(double c, const double* w_new, int64_t D, int64_t rank_cap) {
  Eigen::Map<const Eigen::VectorXd> w(w_new, D);
  const int64_t n = n_prev_ + 1;
  const double wn2 = w.squaredNorm();
  const double total = c * c * trace_prev_ + wn2;
  if (!(total > 0)) return 0.0;
  const int64_t r = std::min<int64_t>({rank_cap, n, D});
  if (r == std::min(n, D)) return wn2 / total;
  if (one_iteration() && block_ready_) return seed_tracked(c, w_new, D, r);
  VQ_CHECK(G_.rows() == D, Error, "SubspaceLeverage::seed_scaled without a preceding stored()");
  G_ *= c * c;
  G_.selfadjointView<Eigen::Lower>().rankUpdate(w);
  track(D, r);
  return (w.transpose() * Q_.leftCols(r)).squaredNorm() / total;
}

double SubspaceLeverage::last_row(const RowMatD& W, int64_t n, int64_t rank_cap) {
  ++calls_;  // the Gram matrix is rebuilt below: earlier Blocks no longer describe it
  const int64_t D = W.cols();
  auto Wn = W.topRows(n);
  const double total = Wn.squaredNorm();
  if (!(total > 0)) return 0.0;
  const int64_t r = std::min<int64_t>({rank_cap, n, D});
  if (r == std::min(n, D)) return W.row(n - 1).squaredNorm() / total;
  G_.setZero(D, D);
  G_.selfadjointView<Eigen::Lower>().rankUpdate(Wn.transpose());
  track(D, r);
  return (W.row(n - 1) * Q_.leftCols(r)).squaredNorm() / total;
}

}  // namespace vq::eviction

namespace vq::eviction {

Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& SubspaceLeverage::block(
    int64_t n, int64_t D) {
  if (Wf_.rows() < n || Wf_.cols() != D) Wf_.resize(std::max<int64_t>(n, 2 * Wf_.rows()), D);
  return Wf_;
}

void SubspaceLeverage::stored_block(int64_t n, int64_t rank_cap, double* out) {
  const int64_t D = Wf_.cols();
  n_prev_ = n;
  V_ = nullptr;  // no stored_scaled block now
  block_ready_ = false;
  vq_ok_ = false;  // Qf_ may change here without VQ_ following it
  p_padded_ = false;
  if (n <= 0) return;
  auto Wf = Wf_.topRows(n);
  Eigen::Map<Eigen::VectorXd> l(out, n);
  if (tmp_.size() < n) tmp_.resize(std::max<int64_t>(n, 2 * tmp_.size()));
  auto norms = tmp_.head(n);
  norms = Wf.rowwise().squaredNorm().cast<double>();
  trace_prev_ = norms.sum();
  if (!(trace_prev_ > 0)) {
    l.setZero();
    return;
  }
  const int64_t r = std::min<int64_t>({rank_cap, n, D});
  const int64_t r1 = std::min<int64_t>({rank_cap, n + 1, D});
  const bool seed_needs_subspace = r1 != std::min<int64_t>(n + 1, D);
  if (r == std::min(n, D)) {
    l = norms / trace_prev_;
    if (!seed_needs_subspace) return;
  }
  const int64_t k = r == std::min(n, D) ? r1 : r;
  if (Qf_.rows() != D || Qf_.cols() != k) {
    G_ = (Wf.transpose() * Wf).cast<double>();  // cold start: exact subspace once
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(G_);
    Qf_ = es.eigenvectors().rightCols(k).rowwise().reverse().cast<float>();
    ++fallbacks_;
  } else {
    Pf_.noalias() = Wf * Qf_;
    Yf_.noalias() = Wf.transpose() * Pf_;
    Eigen::HouseholderQR<Eigen::MatrixXf> qr(Yf_);
    Qf_ = qr.householderQ() * Eigen::MatrixXf::Identity(D, k);
    ++iterations_;
  }
  Pf_.noalias() = Wf * Qf_;
  block_ready_ = true;
  if (r != std::min(n, D)) l = Pf_.rowwise().squaredNorm().cast<double>() / trace_prev_;
}

void SubspaceLeverage::row_replaced(int64_t i) {
  if (i >= 0 && i < static_cast<int64_t>(vq_row_ok_.size())) vq_row_ok_[static_cast<size_t>(i)] = 0;
}

void SubspaceLeverage::row_moved(int64_t from, int64_t to) {
  if (from == to) return;
  const int64_t rows = static_cast<int64_t>(vq_row_ok_.size());
  if (to < 0 || to >= rows) return;
  if (from < 0 || from >= rows || !vq_row_ok_[static_cast<size_t>(from)]) {
    vq_row_ok_[static_cast<size_t>(to)] = 0;
    return;
  }
  std::copy_n(VQ_.begin() + from * kp_, kp_, VQ_.begin() + to * kp_);
  vn_[static_cast<size_t>(to)] = vn_[static_cast<size_t>(from)];
  qn_[static_cast<size_t>(to)] = qn_[static_cast<size_t>(from)];
  vq_row_ok_[static_cast<size_t>(to)] = 1;
}

namespace {

// Skinny products for stored_scaled (k <= a few dozen columns): Eigen's GEMM packs the whole
// n x D operand on every call, which at these shapes costs about as much as the multiply-adds.
// These kernels stream W / V once, 16 fp32 lanes at a time (a GCC/Clang vector type: one
// AVX-512 register, two AVX ones, or scalar code), with every sum taken over d (or i) in
// increasing order, one multiply-add per term.
typedef double Group8 __attribute__((vector_size(64)));  // eight doubles: padded-row kernels
typedef float Lanes16 __attribute__((vector_size(64)));
inline Lanes16 load16(const float* p) {
  Lanes16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store16(float* p, Lanes16 v) {
  std::memcpy(p, &v, sizeof v);
}

// P[R, kp] = A[R rows, D] Q[D, kp] (row-major, kp % 16 == 0).
template <int R>
inline void project_rows(const float* A, int64_t D, int64_t kp, const float* Q, float* P) {
  for (int64_t jb = 0; jb < kp; jb += 16) {
    Lanes16 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = Lanes16{};
    for (int64_t d = 0; d < D; ++d) {
      const Lanes16 q = load16(Q + d * kp + jb);
      for (int r = 0; r < R; ++r) acc[r] += A[r * D + d] * q;
    }
    for (int r = 0; r < R; ++r) store16(P + r * kp + jb, acc[r]);
  }
}

#if defined(__AVX2__) && defined(__FMA__)
// AVX2 (16 ymm registers): the Lanes16 kernels above keep 8 rows x 2 registers of accumulators
// plus their operands live and spill; these keep 4 rows (8 accumulators). Every output element
// is still one fused multiply-add per term in increasing d (project) or increasing row
// (accumulate) order, so the blocking does not change a result.
inline void project4(const float* A, int64_t D, int64_t kp, const float* Q, float* P) {
  for (int64_t jb = 0; jb < kp; jb += 16) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0;
    for (int64_t d = 0; d < D; ++d) {
      const __m256 q0 = _mm256_loadu_ps(Q + d * kp + jb), q1 = _mm256_loadu_ps(Q + d * kp + jb + 8);
      __m256 x = _mm256_broadcast_ss(A + d);
      a0 = _mm256_fmadd_ps(x, q0, a0);
      a1 = _mm256_fmadd_ps(x, q1, a1);
      x = _mm256_broadcast_ss(A + D + d);
      b0 = _mm256_fmadd_ps(x, q0, b0);
      b1 = _mm256_fmadd_ps(x, q1, b1);
      x = _mm256_broadcast_ss(A + 2 * D + d);
      c0 = _mm256_fmadd_ps(x, q0, c0);
      c1 = _mm256_fmadd_ps(x, q1, c1);
      x = _mm256_broadcast_ss(A + 3 * D + d);
      d0 = _mm256_fmadd_ps(x, q0, d0);
      d1 = _mm256_fmadd_ps(x, q1, d1);
    }
    float* o = P + jb;
    _mm256_storeu_ps(o, a0);
    _mm256_storeu_ps(o + 8, a1);
    _mm256_storeu_ps(o + kp, b0);
    _mm256_storeu_ps(o + kp + 8, b1);
    _mm256_storeu_ps(o + 2 * kp, c0);
    _mm256_storeu_ps(o + 2 * kp + 8, c1);
    _mm256_storeu_ps(o + 3 * kp, d0);
    _mm256_storeu_ps(o + 3 * kp + 8, d1);
  }
}

inline void project1(const float* A, int64_t D, int64_t kp, const float* Q, float* P) {
  for (int64_t jb = 0; jb < kp; jb += 16) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (int64_t d = 0; d < D; ++d) {
      const __m256 x = _mm256_broadcast_ss(A + d);
      a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(Q + d * kp + jb), a0);
      a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(Q + d * kp + jb + 8), a1);
    }
    _mm256_storeu_ps(P + jb, a0);
    _mm256_storeu_ps(P + jb + 8, a1);
  }
}

void project(const float* A, int64_t n, int64_t D, int64_t kp, const float* Q, float* P) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) project4(A + i * D, D, kp, Q, P + i * kp);
  for (; i < n; ++i) project1(A + i * D, D, kp, Q, P + i * kp);
}

// Y[D, kp] += A[n, D]^T P[n, kp]: a 4 x 16 tile of Y stays in registers over all n rows.
void accumulate_product(const float* A, int64_t n, int64_t D, int64_t kp, const float* P,
                        float* Y) {
  for (int64_t jb = 0; jb < kp; jb += 16) {
    int64_t d = 0;
    for (; d + 4 <= D; d += 4) {
      float* y = Y + d * kp + jb;
      __m256 y00 = _mm256_loadu_ps(y), y01 = _mm256_loadu_ps(y + 8);
      __m256 y10 = _mm256_loadu_ps(y + kp), y11 = _mm256_loadu_ps(y + kp + 8);
      __m256 y20 = _mm256_loadu_ps(y + 2 * kp), y21 = _mm256_loadu_ps(y + 2 * kp + 8);
      __m256 y30 = _mm256_loadu_ps(y + 3 * kp), y31 = _mm256_loadu_ps(y + 3 * kp + 8);
      for (int64_t r = 0; r < n; ++r) {
        const __m256 p0 = _mm256_loadu_ps(P + r * kp + jb),
                     p1 = _mm256_loadu_ps(P + r * kp + jb + 8);
        const float* ar = A + r * D + d;
        __m256 x = _mm256_broadcast_ss(ar);
        y00 = _mm256_fmadd_ps(x, p0, y00);
        y01 = _mm256_fmadd_ps(x, p1, y01);
        x = _mm256_broadcast_ss(ar + 1);
        y10 = _mm256_fmadd_ps(x, p0, y10);
        y11 = _mm256_fmadd_ps(x, p1, y11);
        x = _mm256_broadcast_ss(ar + 2);
        y20 = _mm256_fmadd_ps(x, p0, y20);
        y21 = _mm256_fmadd_ps(x, p1, y21);
        x = _mm256_broadcast_ss(ar + 3);
        y30 = _mm256_fmadd_ps(x, p0, y30);
        y31 = _mm256_fmadd_ps(x, p1, y31);
      }
      _mm256_storeu_ps(y, y00);
      _mm256_storeu_ps(y + 8, y01);
      _mm256_storeu_ps(y + kp, y10);
      _mm256_storeu_ps(y + kp + 8, y11);
      _mm256_storeu_ps(y + 2 * kp, y20);
      _mm256_storeu_ps(y + 2 * kp + 8, y21);
      _mm256_storeu_ps(y + 3 * kp, y30);
      _mm256_storeu_ps(y + 3 * kp + 8, y31);
    }
    for (; d < D; ++d) {
      float* y = Y + d * kp + jb;
      __m256 y0 = _mm256_loadu_ps(y), y1 = _mm256_loadu_ps(y + 8);
      for (int64_t r = 0; r < n; ++r) {
        const __m256 x = _mm256_broadcast_ss(A + r * D + d);
        y0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(P + r * kp + jb), y0);
        y1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(P + r * kp + jb + 8), y1);
      }
      _mm256_storeu_ps(y, y0);
      _mm256_storeu_ps(y + 8, y1);
    }
  }
}
#else
void project(const float* A, int64_t n, int64_t D, int64_t kp, const float* Q, float* P) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) project_rows<8>(A + i * D, D, kp, Q, P + i * kp);
  for (; i < n; ++i) project_rows<1>(A + i * D, D, kp, Q, P + i * kp);
}

// Y[D, kp] += A[R rows, D]^T P[R, kp].
template <int R>
inline void accumulate_rows(const float* A, int64_t D, int64_t kp, const float* P, float* Y) {
  for (int64_t jb = 0; jb < kp; jb += 16) {
    Lanes16 p[R];
    for (int r = 0; r < R; ++r) p[r] = load16(P + r * kp + jb);
    int64_t d = 0;
    // four rows of Y at a time: four independent multiply-add chains (each Y row still sums
    // over r in increasing order) instead of one chain whose latency would bound the loop
    for (; d + 4 <= D; d += 4) {
      Lanes16 y0 = load16(Y + d * kp + jb), y1 = load16(Y + (d + 1) * kp + jb);
      Lanes16 y2 = load16(Y + (d + 2) * kp + jb), y3 = load16(Y + (d + 3) * kp + jb);
      for (int r = 0; r < R; ++r) {
        const float* ar = A + r * D + d;
        y0 += ar[0] * p[r];
        y1 += ar[1] * p[r];
        y2 += ar[2] * p[r];
        y3 += ar[3] * p[r];
      }
      store16(Y + d * kp + jb, y0);
      store16(Y + (d + 1) * kp + jb, y1);
      store16(Y + (d + 2) * kp + jb, y2);
      store16(Y + (d + 3) * kp + jb, y3);
    }
    for (; d < D; ++d) {
      Lanes16 y = load16(Y + d * kp + jb);
      for (int r = 0; r < R; ++r) y += A[r * D + d] * p[r];
      store16(Y + d * kp + jb, y);
    }
  }
}

// Y[D, kp] += A[n, D]^T P[n, kp].
void accumulate_product(const float* A, int64_t n, int64_t D, int64_t kp, const float* P,
                        float* Y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) accumulate_rows<8>(A + i * D, D, kp, P + i * kp, Y);
  for (; i < n; ++i) accumulate_rows<1>(A + i * D, D, kp, P + i * kp, Y);
}
#endif

// sum of x[j]^2 for j < m, in increasing j (one fixed order for every caller).
float squared_norm(const float* x, int64_t m) {
  float s = 0;
  for (int64_t j = 0; j < m; ++j) s += x[j] * x[j];
  return s;
}

}  // namespace

// (declared in leverage.hpp) ||b||^2 - (b . z)^2 for z the unit eigenvector of the smallest
// eigenvalue of the symmetric T (m x m): the energy of b in the other m - 1 eigendirections, which
// is what the seed needs when its Rayleigh-Ritz drops exactly one direction. A full eigensolve
// spends most of its time on vectors that are thrown away; here: tridiagonalize, bisect (Sturm
// counts) for the smallest eigenvalue, inverse iteration (LDL^T of T - s I, s just below it,
// positive definite so no pivoting), and map back. Returns false (caller does the full eigensolve)
// on anything non-finite or a pivot that is not positive.
bool energy_outside_smallest(const Eigen::MatrixXd& T, const Eigen::VectorXd& b, double& out,
                             double abs_tol) {
  const Eigen::Index m = T.rows();
  if (m < 2) return false;
  // Householder tridiagonalization H^T T H = tridiag(d, e), in place on a full copy of T whose
  // rows are padded to whole groups of eight (row-major), with each reflector applied to b as it
  // is made: bt = H^T b, so that b . z = bt . x for x the tridiagonal matrix's eigenvector.
  // Hand-written for these sizes (m <= head_dim + 1): no allocation past the first call on a
  // thread. The reflector v and the product p are kept at full row length, zero before the
  // trailing block, so the product and the rank-2 update run on whole groups of every trailing
  // row and leave the columns before the block as they are.
  const Eigen::Index G = (m + 7) / 8, ld = 8 * G;
  thread_local std::vector<Group8> rows;  // A (m x ld), then v and pv (ld each)
  rows.assign(static_cast<size_t>((m + 2) * G), Group8{});
  auto* A = reinterpret_cast<double*>(rows.data());
  double* v = A + m * ld;
  double* pv = v + ld;
  auto* vg = reinterpret_cast<Group8*>(v);
  auto* pg = reinterpret_cast<Group8*>(pv);
  thread_local std::vector<double> work;
  const auto mm = static_cast<size_t>(m);
  work.resize(5 * mm);
  double* bt = work.data();
  double* d = bt + mm;
  double* e = d + mm;
  double* piv = e + mm;
  double* x = piv + mm;
  for (Eigen::Index i = 0; i < m; ++i) {
    for (Eigen::Index j = 0; j < m; ++j) A[i * ld + j] = T(i, j);
    bt[i] = b(i);
  }
  for (Eigen::Index k = 0; k + 2 < m; ++k) {
    // the reflector that zeroes A[k+2.., k]: v = x - alpha e_1 over rows k+1..m-1
    const Eigen::Index r0 = k + 1, g0 = r0 / 8;
    double tail = 0;
    for (Eigen::Index i = r0 + 1; i < m; ++i) tail += A[i * ld + k] * A[i * ld + k];
    const double x0 = A[r0 * ld + k];
    if (!(tail > 0)) {  // already tridiagonal in this column (or non-finite: caught below)
      if (!std::isfinite(tail)) return false;
      continue;
    }
    const double norm = std::sqrt(x0 * x0 + tail);
    const double alpha = x0 >= 0 ? -norm : norm;
    for (Eigen::Index i = 0; i < ld; ++i) v[i] = 0;
    v[r0] = x0 - alpha;
    for (Eigen::Index i = r0 + 1; i < m; ++i) v[i] = A[i * ld + k];
    const double vtv = v[r0] * v[r0] + tail;
    const double beta = 2.0 / vtv;
    // trailing block S (rows/cols r0..): S <- (I - beta v v^T) S (I - beta v v^T)
    //   p = beta S v, K = beta/2 (v . p), q = p - K v, S <- S - v q^T - q v^T
    // S v as a sum of S's rows (S being symmetric): independent lanes, no reductions
    for (Eigen::Index g = 0; g < G; ++g) pg[g] = Group8{};
    for (Eigen::Index j = r0; j < m; ++j) {
      const auto* row = reinterpret_cast<const Group8*>(A + j * ld);
      const double vj = v[j];
      for (Eigen::Index g = g0; g < G; ++g) pg[g] += vj * row[g];
    }
    for (Eigen::Index i = 0; i < r0; ++i) pv[i] = 0;  // the columns before the block: not S's
    double vp = 0;
    for (Eigen::Index i = r0; i < m; ++i) {
      pv[i] *= beta;
      vp += v[i] * pv[i];
    }
    const double K = 0.5 * beta * vp;
    for (Eigen::Index i = r0; i < m; ++i) pv[i] -= K * v[i];
    for (Eigen::Index i = r0; i < m; ++i) {
      auto* row = reinterpret_cast<Group8*>(A + i * ld);
      const double vi = v[i], pi = pv[i];
      for (Eigen::Index g = g0; g < G; ++g) row[g] -= vi * pg[g] + pi * vg[g];
    }
    A[r0 * ld + k] = alpha;
    double vb = 0;
    for (Eigen::Index i = r0; i < m; ++i) vb += v[i] * bt[i];
    vb *= beta;
    for (Eigen::Index i = r0; i < m; ++i) bt[i] -= vb * v[i];
  }
  for (Eigen::Index i = 0; i < m; ++i) {
    d[i] = A[i * ld + i];
    if (i + 1 < m) e[i] = A[(i + 1) * ld + i];
  }
  double lo = d[0], hi = d[0], nrm = 0, dmin = d[0];
  for (Eigen::Index i = 0; i < m; ++i) {  // Gershgorin interval, and the smallest diagonal entry
    const double rad = (i > 0 ? std::abs(e[i - 1]) : 0.0) + (i + 1 < m ? std::abs(e[i]) : 0.0);
    lo = std::min(lo, d[i] - rad);
    hi = std::max(hi, d[i] + rad);
    nrm = std::max(nrm, std::abs(d[i]) + rad);
    dmin = std::min(dmin, d[i]);
  }
  if (!(nrm > 0) || !std::isfinite(nrm)) return false;
  const double eps = std::numeric_limits<double>::epsilon();
  const double pivmin = std::numeric_limits<double>::min() / eps;
  // Sturm counts (eigenvalues of the tridiagonal matrix below a shift) at three shifts at once:
  // each count is a chain of dependent divisions, three chains keep the divider busy
  auto below3 = [&](const double s[3], int c[3]) {
    double q[3];
    for (int t = 0; t < 3; ++t) {
      q[t] = d[0] - s[t];
      if (std::abs(q[t]) < pivmin) q[t] = -pivmin;
      c[t] = q[t] < 0;
    }
    for (Eigen::Index i = 1; i < m; ++i) {
      const double e2 = e[i - 1] * e[i - 1];
      for (int t = 0; t < 3; ++t) {
        q[t] = d[i] - s[t] - e2 / q[t];
        if (std::abs(q[t]) < pivmin) q[t] = -pivmin;
        c[t] += q[t] < 0;
      }
    }
  };
  // The callers' T is positive semidefinite (a Gram matrix plus b b^T), so its smallest
  // eigenvalue lies in [0, min_i d_i] (a diagonal entry of the tridiagonal matrix is a Rayleigh
  // quotient): far narrower than Gershgorin's interval when that eigenvalue is small against
  // the norm, and bisection stops at an absolute width. Rounding can put the eigenvalue a little
  // below 0, so the bracket is widened by a few ulps of the norm and both ends are checked with a
  // Sturm count (below3 counts three shifts at once; the third repeats the upper end); when
  // either check fails, Gershgorin's interval stands.
  {
    const double slack = 64 * eps * nrm;
    const double s[3] = {std::max(lo, -slack), std::min(hi, dmin + slack),
                         std::min(hi, dmin + slack)};
    int c[3];
    if (s[1] > s[0]) {
      below3(s, c);
      if (c[0] == 0 && c[1] >= 1) {
        lo = s[0];
        hi = s[1];
      }
    }
  }
  // narrow [lo, hi] around the smallest eigenvalue to full relative precision, or (abs_tol > 0)
  // to abs_tol * ||T||, a quarter per round: three inverse iterations from a shift that close
  // converge unless the two smallest eigenvalues are within ~abs_tol * 1e3 of each other, where
  // dropping either is as good
  const double width = abs_tol > 0 ? abs_tol * nrm : 0.0;
  for (int it = 0;
       it < 100 &&
       hi - lo > std::max(width, 2 * eps * std::max(std::abs(lo), std::abs(hi)) + pivmin);
       ++it) {
    const double step = 0.25 * (hi - lo);
    const double s[3] = {lo + step, lo + 2 * step, hi - step};
    int c[3];
    below3(s, c);
    if (c[0] >= 1) {
      hi = s[0];
    } else if (c[1] >= 1) {
      lo = s[0];
      hi = s[1];
    } else if (c[2] >= 1) {
      lo = s[1];
      hi = s[2];
    } else {
      lo = s[2];
    }
  }
  // inverse iteration: LDL^T of the tridiagonal matrix shifted just below the eigenvalue
  const double shift = lo - 8 * eps * nrm;
  double* mult = v;  // free by now
  piv[0] = d[0] - shift;
  for (Eigen::Index i = 1; i < m; ++i) {
    mult[i - 1] = e[i - 1] / piv[i - 1];
    piv[i] = d[i] - shift - mult[i - 1] * e[i - 1];
  }
  for (Eigen::Index i = 0; i < m; ++i)
    if (!(piv[i] > 0) || !std::isfinite(piv[i])) return false;
  for (Eigen::Index i = 0; i < m; ++i) x[i] = 1.0;
  for (int it = 0; it < 3; ++it) {
    for (Eigen::Index i = 1; i < m; ++i) x[i] -= mult[i - 1] * x[i - 1];
    for (Eigen::Index i = 0; i < m; ++i) x[i] /= piv[i];
    for (Eigen::Index i = m - 1; i-- > 0;) x[i] -= mult[i] * x[i + 1];
    double xn = 0;
    for (Eigen::Index i = 0; i < m; ++i) xn += x[i] * x[i];
    xn = std::sqrt(xn);
    if (!(xn > 0) || !std::isfinite(xn)) return false;
    for (Eigen::Index i = 0; i < m; ++i) x[i] /= xn;
  }
  double p = 0, bb = 0;
  for (Eigen::Index i = 0; i < m; ++i) {
    p += bt[i] * x[i];
    bb += b(i) * b(i);
  }
  out = std::max(bb - p * p, 0.0);
  return std::isfinite(out);
}

bool smallest_below(const Eigen::MatrixXd& T, double tol) {
  const Eigen::Index m = T.rows();
  if (!T.allFinite()) return false;
  double norm = 0;
  for (Eigen::Index i = 0; i < m; ++i) norm = std::max(norm, T.row(i).cwiseAbs().sum());
  if (!(norm > 0) || !std::isfinite(norm)) return false;
  const double shift = tol * norm;
  // right-looking LDL^T of T - shift I on a full copy whose rows are padded to whole groups of
  // eight: after step k the trailing block holds the Schur complement, whose leading entry is the
  // next pivot; a step takes row k (column k, by symmetry) times a multiplier from every later
  // row, independent whole-row vector updates with one division on the chain between steps
  const Eigen::Index groups = (m + 7) / 8, ld = 8 * groups;
  thread_local std::vector<Group8> rows;
  rows.assign(static_cast<size_t>(m * groups), Group8{});
  auto* A = reinterpret_cast<double*>(rows.data());
  for (Eigen::Index i = 0; i < m; ++i)
    for (Eigen::Index j = 0; j < m; ++j) A[i * ld + j] = T(j, i);  // T is symmetric
  for (Eigen::Index i = 0; i < m; ++i) A[i * ld + i] -= shift;
  for (Eigen::Index k = 0; k < m; ++k) {
    const double d = A[k * ld + k];
    if (!(d > 0)) return true;
    const double inv = 1.0 / d;
    const Group8* rk = rows.data() + k * groups;
    // only the groups holding columns k + 1 on still matter
    const Eigen::Index g0 = (k + 1) / 8;
    for (Eigen::Index j = k + 1; j < m; ++j) {
      const double f = A[k * ld + j] * inv;
      Group8* rj = rows.data() + j * groups;
      for (Eigen::Index g = g0; g < groups; ++g) rj[g] -= f * rk[g];
    }
  }
  return false;
}

SubspaceLeverage::Block SubspaceLeverage::stored_scaled(const store::RowSource& V, const double* a,
                                                        int64_t n, int64_t rank_cap, double* out) {
  VQ_CHECK(one_iteration(), Error,
           "SubspaceLeverage::stored_scaled needs the one-iteration solver (the converged one "
           "scores a formed block with stored())");
  score_scaled(V, a, n, rank_cap, out);
  return issue(rank_cap);
}

void SubspaceLeverage::score_scaled(const store::RowSource& V, const double* a, int64_t n,
                                    int64_t rank_cap, double* out) {
  const int64_t D = V.dim();
  n_prev_ = n;
  block_ready_ = false;
  p_padded_ = false;
  V_ = &V;
  const bool cache_ok = vq_ok_;
  vq_ok_ = false;
  if (n <= 0) return;
  // The per-row cache (V Q and ||v_i||^2) follows V's slots; (re)size it first.
  const int64_t rank = std::min<int64_t>({rank_cap, n, D});
  const int64_t r1 = std::min<int64_t>({rank_cap, n + 1, D});
  const bool closed = rank == std::min(n, D);
  const int64_t k = closed ? r1 : rank;
  const int64_t kp = (k + 15) / 16 * 16;
  bool all_stale = !cache_ok;
  if (kp != kp_ || static_cast<int64_t>(vq_row_ok_.size()) < n) {
    kp_ = kp;
    const int64_t rows = std::max<int64_t>(n, 2 * static_cast<int64_t>(vq_row_ok_.size()));
    VQ_.assign(static_cast<size_t>(rows * kp), 0.0f);
    vn_.assign(static_cast<size_t>(rows), 0.0f);
    qn_.assign(static_cast<size_t>(rows), 0.0f);
    vq_row_ok_.assign(static_cast<size_t>(rows), 0);
    all_stale = true;
  }
  if (static_cast<int64_t>(af_.size()) < n) af_.resize(static_cast<size_t>(n));
  if (tmp_.size() < n) tmp_.resize(std::max<int64_t>(n, 2 * tmp_.size()));
  // Between refreshes the basis stays put: score against it from the per-slot cache.
  if (refresh_ > 1 && !all_stale && since_iteration_ + 1 < refresh_ && Qf_.rows() == D &&
      Qf_.cols() == k && static_cast<int64_t>(Qp_.size()) == D * kp &&
      score_between_refreshes(V, a, n, closed, out))
    return;
  since_iteration_ = 0;
  Eigen::Map<Eigen::VectorXd> l(out, n);
  auto norms = tmp_.head(n);
  // ||w_i||^2 = a_i^2 ||v_i||^2: W = diag(a) V is never formed (it would be an extra pass
  // over n x D values); each row's squared norm is kept while the row stays in its slot.
  // V is read block by block (its resident form is decoded into blk_, never copied whole).
  auto for_blocks = [&](auto&& fn) {
    store::for_each_block(V, blk_,
                          [&](int64_t first, int64_t m, const float* rows) { fn(first, m, rows); });
  };
  for_blocks([&](int64_t first, int64_t m, const float* rows) {
    for (int64_t j = 0; j < m; ++j) {
      const int64_t i = first + j;
      if (!(all_stale || !vq_row_ok_[static_cast<size_t>(i)])) continue;
      vn_[static_cast<size_t>(i)] =
          Eigen::Map<const Eigen::VectorXf>(rows + j * D, D).squaredNorm();
    }
  });
  for (int64_t i = 0; i < n; ++i) {
    const float ai = static_cast<float>(a[i]);
    af_[static_cast<size_t>(i)] = ai;
    norms(i) = static_cast<double>(ai * ai) * static_cast<double>(vn_[static_cast<size_t>(i)]);
  }
  trace_prev_ = norms.sum();
  if (!(trace_prev_ > 0)) {
    l.setZero();
    return;
  }
  const bool seed_needs_subspace = r1 != std::min<int64_t>(n + 1, D);
  if (closed) {
    l = norms / trace_prev_;
    if (!seed_needs_subspace) return;
  }
  if (static_cast<int64_t>(Pp_.size()) < n * kp) Pp_.resize(static_cast<size_t>(n * kp));
  auto pack_q = [&] {
    Qp_.assign(static_cast<size_t>(D * kp), 0.0f);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t j = 0; j < k; ++j) Qp_[static_cast<size_t>(d * kp + j)] = Qf_(d, j);
  };
  if (Qf_.rows() != D || Qf_.cols() != k) {
    auto& Wfull = block(n, D);  // cold start: exact subspace of W^T W once
    for_blocks([&](int64_t first, int64_t m, const float* rows) {
      for (int64_t j = 0; j < m; ++j)
        Wfull.row(first + j) = af_[static_cast<size_t>(first + j)] *
                               Eigen::Map<const Eigen::RowVectorXf>(rows + j * D, D);
    });
    auto Wf = Wfull.topRows(n);
    G_ = (Wf.transpose() * Wf).cast<double>();
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(G_);
    Qf_ = es.eigenvectors().rightCols(k).rowwise().reverse().cast<float>();
    ++fallbacks_;
  } else {
    // One subspace iteration, Q <- orth(W^T W Q) with W^T W Q = V^T diag(a^2) (V Q): only the
    // rows of V that changed since the last call need their V Q product.
    pack_q();
    Yp_.resize(static_cast<size_t>(D * kp));
    std::fill(Yp_.begin(), Yp_.end(), 0.0f);
    // Blocks of kReadBlock rows (a multiple of 8) keep accumulate_rows' summation order.
    for_blocks([&](int64_t first, int64_t m, const float* rows) {
      for (int64_t j = 0; j < m; ++j) {
        const int64_t i = first + j;
        if (all_stale || !vq_row_ok_[static_cast<size_t>(i)])
          project(rows + j * D, 1, D, kp, Qp_.data(), VQ_.data() + i * kp);
        const float ai = af_[static_cast<size_t>(i)];
        const float* vq = VQ_.data() + i * kp;
        float* p = Pp_.data() + i * kp;
        for (int64_t c = 0; c < kp; ++c) p[c] = ai * (ai * vq[c]);
      }
      accumulate_product(rows, m, D, kp, Pp_.data() + first * kp, Yp_.data());
    });
    Yf_ = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0,
                     Eigen::OuterStride<>>(Yp_.data(), D, k, Eigen::OuterStride<>(kp));
    // Orthonormal basis of span(Y): Gram-Schmidt with every column orthogonalized twice (fp32
    // orthogonality to ~1e-7, like Householder), a fraction of the cost of forming Householder's
    // Q. Only the span matters downstream (row norms of W Q, the seed's Rayleigh-Ritz), so the
    // column signs it picks differently are immaterial. A column that loses nearly all of its
    // norm (Y numerically rank-deficient) sends the whole basis through Householder instead.
    if (gram_schmidt_twice(Yf_)) {
      Qf_.swap(Yf_);
    } else {
      Yf_ = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>,
                       0, Eigen::OuterStride<>>(Yp_.data(), D, k, Eigen::OuterStride<>(kp));
      Eigen::HouseholderQR<Eigen::MatrixXf> qr(Yf_);
      Qf_ = qr.householderQ() * Eigen::MatrixXf::Identity(D, k);
    }
    ++iterations_;
  }
  pack_q();
  for_blocks([&](int64_t first, int64_t m, const float* rows) {
    project(rows, m, D, kp, Qp_.data(), VQ_.data() + first * kp);
  });
  std::fill(vq_row_ok_.begin(), vq_row_ok_.begin() + n, uint8_t{1});
  std::fill(vq_row_ok_.begin() + n, vq_row_ok_.end(), uint8_t{0});
  vq_ok_ = true;
  for (int64_t i = 0; i < n; ++i)
    qn_[static_cast<size_t>(i)] = squared_norm(VQ_.data() + i * kp, kp);
  // P = W Q = diag(a) (V Q), and the leverage ||p_i||^2 / ||W||_F^2.
  for (int64_t i = 0; i < n; ++i) {
    const float ai = af_[static_cast<size_t>(i)];
    const float* vq = VQ_.data() + i * kp;
    float* p = Pp_.data() + i * kp;
    float s = 0;
    for (int64_t j = 0; j < kp; ++j) {
      p[j] = ai * vq[j];
      s += p[j] * p[j];
    }
    if (!closed) l(i) = static_cast<double>(s) / trace_prev_;
  }
  p_padded_ = true;
  block_ready_ = true;
}

bool SubspaceLeverage::score_between_refreshes(const store::RowSource& V, const double* a,
                                               int64_t n, bool closed, double* out) {
  const int64_t D = V.dim();
  const int64_t kp = kp_;
  // Rows that changed since the last call (the previous newcomer, rows moved by evictions that
  // were not tracked): project them once against the unchanged basis.
  if (static_cast<int64_t>(blk_.size()) < D) blk_.resize(static_cast<size_t>(D));
  for (int64_t i = 0; i < n; ++i) {
    if (vq_row_ok_[static_cast<size_t>(i)]) continue;
    V.read(i, 1, blk_.data());
    vn_[static_cast<size_t>(i)] = squared_norm(blk_.data(), D);
    project(blk_.data(), 1, D, kp, Qp_.data(), VQ_.data() + i * kp);
    qn_[static_cast<size_t>(i)] = squared_norm(VQ_.data() + i * kp, kp);
    vq_row_ok_[static_cast<size_t>(i)] = 1;
  }
  vq_ok_ = true;
  auto norms = tmp_.head(n);
  Eigen::Map<Eigen::VectorXd> l(out, n);
  for (int64_t i = 0; i < n; ++i) {
    const float ai = static_cast<float>(a[i]);
    af_[static_cast<size_t>(i)] = ai;
    norms(i) = static_cast<double>(ai * ai) * static_cast<double>(vn_[static_cast<size_t>(i)]);
  }
  trace_prev_ = norms.sum();
  if (!(trace_prev_ > 0)) {
    l.setZero();
    return true;
  }
  if (static_cast<int64_t>(Pp_.size()) < n * kp) Pp_.resize(static_cast<size_t>(n * kp));
  // P = W Q = diag(a) (V Q) for the seed; the leverage of row i is a_i^2 ||V_i Q||^2 / trace.
  for (int64_t i = 0; i < n; ++i) {
    const float ai = af_[static_cast<size_t>(i)];
    const float* vq = VQ_.data() + i * kp;
    float* p = Pp_.data() + i * kp;
    for (int64_t j = 0; j < kp; ++j) p[j] = ai * vq[j];
    l(i) = closed ? norms(i) / trace_prev_
                  : static_cast<double>(ai * ai) *
                        static_cast<double>(qn_[static_cast<size_t>(i)]) / trace_prev_;
  }
  p_padded_ = true;
  block_ready_ = true;
  ++since_iteration_;
  ++reuses_;
  return true;
}

double SubspaceLeverage::seed_tracked(double c, const double* w_new, int64_t D, int64_t r) {
  // Rayleigh-Ritz of G' = c^2 W^T W + w w^T on B = [Q, u], u the unit part of w orthogonal to Q.
  const int64_t n = n_prev_;
  const int64_t k = Qf_.cols();
  const Eigen::VectorXf w = Eigen::Map<const Eigen::VectorXd>(w_new, D).cast<float>();
  const double wn2 = Eigen::Map<const Eigen::VectorXd>(w_new, D).squaredNorm();
  const double total = c * c * trace_prev_ + wn2;
  if (!(total > 0)) return 0.0;
  const Eigen::VectorXf wq = Qf_.transpose() * w;
  Eigen::VectorXf u = w - Qf_ * wq;
  const float un = u.norm();
  const bool extend = un > 1e-6f * std::sqrt(static_cast<float>(wn2));
  const int64_t m = k + (extend ? 1 : 0);
  Eigen::MatrixXd T(m, m);
  const double c2 = c * c;
  using StridedF =
      Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0,
                 Eigen::OuterStride<>>;
  const int64_t pstride = p_padded_ ? kp_ : k;
  // W Q: stored_scaled's padded row-major buffer, or stored_block's Pf_ (column-major)
  const StridedF Pp(Pp_.data(), p_padded_ ? n : 0, k, Eigen::OuterStride<>(pstride));
  if (p_padded_) {
    T.topLeftCorner(k, k) = c2 * (Pp.transpose() * Pp).cast<double>();
  } else {
    T.topLeftCorner(k, k) = c2 * (Pf_.transpose() * Pf_).cast<double>();  // Pf_ = W Q
  }
  Eigen::VectorXd wb(m);
  wb.head(k) = wq.cast<double>();
  if (extend) {
    u /= un;
    if (p_padded_) {  // W u = diag(a) (V u), from stored_scaled's V
      Wuf_.resize(n);
      row_dots(*V_, n, u.data(), Wuf_.data());
      for (int64_t i = 0; i < n; ++i) Wuf_(i) *= af_[static_cast<size_t>(i)];
    } else {
      Wuf_.noalias() = Wf_.topRows(n) * u;
    }
    if (p_padded_) {
      T.topRightCorner(k, 1) = c2 * (Pp.transpose() * Wuf_).cast<double>();
    } else {
      T.topRightCorner(k, 1) = c2 * (Pf_.transpose() * Wuf_).cast<double>();
    }
    T.bottomLeftCorner(1, k) = T.topRightCorner(k, 1).transpose();
    T(k, k) = c2 * static_cast<double>(Wuf_.squaredNorm());
    wb(k) = static_cast<double>(w.dot(u));
  }
  T.noalias() += wb * wb.transpose();
  const int64_t dropped = m - std::min(r, m);
  if (dropped == 0) return wb.squaredNorm() / total;  // every Ritz direction kept
  if (dropped == 1) {  // the usual case: only the smallest eigenvector is needed
    double kept = 0;
    if (energy_outside_smallest(T, wb, kept)) return kept / total;
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(T);
  const Eigen::MatrixXd Zr = es.eigenvectors().rightCols(std::min(r, m));
  return (wb.transpose() * Zr).squaredNorm() / total;
}

}  // namespace vq::eviction

namespace vq::eviction {

int64_t SubspaceLeverage::bytes() const {
  const auto e = [](const auto& m) {
    return static_cast<int64_t>(m.size()) * static_cast<int64_t>(sizeof(m(0)));
  };
  const auto v = [](const auto& x) { return static_cast<int64_t>(x.capacity() * sizeof(x[0])); };
  return e(G_) + e(Q_) + e(Z_) + e(T_) + e(Wf_) + e(Qf_) + e(Pf_) + e(Yf_) + e(Wuf_) + e(tmp_) +
         v(Qp_) + v(VQ_) + v(Pp_) + v(Yp_) + v(af_) + v(vn_) + v(qn_) + v(vq_row_ok_) + v(blk_);
}

}  // namespace vq::eviction

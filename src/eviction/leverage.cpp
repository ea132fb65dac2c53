#include "eviction/leverage.hpp"

#include <Eigen/Dense>
#include <algorithm>

#include "veloxquant/errors.hpp"

namespace vq::eviction {

using MapW = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

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
  const int64_t k = std::min<int64_t>(D, r + oversample);
  auto Gs = G_.selfadjointView<Eigen::Lower>();
  if (Q_.rows() != D || Q_.cols() != k) {  // cold start: one exact eigensolve
    Eigen::MatrixXd full = Gs;
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(full);
    Q_ = es.eigenvectors().rightCols(k).rowwise().reverse();
    ++fallbacks_;
    return;
  }
  for (int64_t it = 0; it < max_iterations; ++it) {
    ++iterations_;
    Z_.noalias() = Gs * Q_;                 // D x k
    T_.noalias() = Q_.transpose() * Z_;     // k x k Rayleigh quotient
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
    if (worst <= tol * scale) return;
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

void SubspaceLeverage::stored(const RowMatD& W, int64_t n, int64_t rank_cap, double* out) {
  const int64_t D = W.cols();
  if (tracked) {  // one code path for tracked mode: the fp32 block
    if (n > 0) block(n, D).topRows(n) = W.topRows(n).cast<float>();
    stored_block(n, rank_cap, out);
    return;
  }
  n_prev_ = n;
  if (n <= 0) return;
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
    return;
  }
  G_.setZero(D, D);
  G_.selfadjointView<Eigen::Lower>().rankUpdate(Wn.transpose());
  trace_prev_ = G_.diagonal().sum();
  if (!(trace_prev_ > 0)) {
    l.setZero();
    return;
  }
  track(D, r);
  if (tmp_.size() < n) tmp_.resize(std::max<int64_t>(n, 2 * tmp_.size()));
  l = (Wn * Q_.leftCols(r)).rowwise().squaredNorm() / trace_prev_;
}

double SubspaceLeverage::seed_scaled(double c, const double* w_new, int64_t D, int64_t rank_cap) {
  Eigen::Map<const Eigen::VectorXd> w(w_new, D);
  const int64_t n = n_prev_ + 1;
  const double wn2 = w.squaredNorm();
  const double total = c * c * trace_prev_ + wn2;
  if (!(total > 0)) return 0.0;
  const int64_t r = std::min<int64_t>({rank_cap, n, D});
  if (r == std::min(n, D)) return wn2 / total;
  if (tracked && block_ready_) return seed_tracked(c, w_new, D, r);
  VQ_CHECK(G_.rows() == D, Error, "SubspaceLeverage::seed_scaled without a preceding stored()");
  G_ *= c * c;
  G_.selfadjointView<Eigen::Lower>().rankUpdate(w);
  track(D, r);
  return (w.transpose() * Q_.leftCols(r)).squaredNorm() / total;
}

double SubspaceLeverage::last_row(const RowMatD& W, int64_t n, int64_t rank_cap) {
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
  block_ready_ = false;
  vq_ok_ = false;  // Qf_ may change here without VQ_ following it
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
  VQ_.row(to) = VQ_.row(from);
  vq_row_ok_[static_cast<size_t>(to)] = 1;
}

void SubspaceLeverage::stored_scaled(
    const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& V, const double* a,
    int64_t n, int64_t rank_cap, double* out) {
  const int64_t D = V.cols();
  n_prev_ = n;
  block_ready_ = false;
  const bool cache_ok = vq_ok_;
  vq_ok_ = false;
  if (n <= 0) return;
  auto& Wfull = block(n, D);
  if (af_.size() < n) af_.resize(std::max<int64_t>(n, 2 * af_.size()));
  for (int64_t i = 0; i < n; ++i) {
    af_(i) = static_cast<float>(a[i]);
    Wfull.row(i) = af_(i) * V.row(i);
  }
  auto Wf = Wfull.topRows(n);
  auto Vn = V.topRows(n);
  auto an = af_.head(n);
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
  if (VQ_.rows() < n || VQ_.cols() != k) {
    VQ_.resize(std::max<int64_t>(n, 2 * VQ_.rows()), k);
    vq_row_ok_.assign(static_cast<size_t>(VQ_.rows()), 0);
  }
  if (Qf_.rows() != D || Qf_.cols() != k) {
    G_ = (Wf.transpose() * Wf).cast<double>();  // cold start: exact subspace once
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(G_);
    Qf_ = es.eigenvectors().rightCols(k).rowwise().reverse().cast<float>();
    ++fallbacks_;
  } else {
    // W Q = diag(a) (V Q): only the rows of V that changed since the last call need a product.
    for (int64_t i = 0; i < n; ++i)
      if (!cache_ok || !vq_row_ok_[static_cast<size_t>(i)]) VQ_.row(i).noalias() = Vn.row(i) * Qf_;
    Pf_.noalias() = an.asDiagonal() * VQ_.topRows(n);
    Yf_.noalias() = Wf.transpose() * Pf_;
    Eigen::HouseholderQR<Eigen::MatrixXf> qr(Yf_);
    Qf_ = qr.householderQ() * Eigen::MatrixXf::Identity(D, k);
    ++iterations_;
  }
  VQ_.topRows(n).noalias() = Vn * Qf_;
  std::fill(vq_row_ok_.begin(), vq_row_ok_.begin() + n, uint8_t{1});
  std::fill(vq_row_ok_.begin() + n, vq_row_ok_.end(), uint8_t{0});
  vq_ok_ = true;
  Pf_.noalias() = an.asDiagonal() * VQ_.topRows(n);
  block_ready_ = true;
  if (r != std::min(n, D)) l = Pf_.rowwise().squaredNorm().cast<double>() / trace_prev_;
}

double SubspaceLeverage::seed_tracked(double c, const double* w_new, int64_t D, int64_t r) {
  // Rayleigh-Ritz of G' = c^2 W^T W + w w^T on B = [Q, u], u the unit part of w orthogonal to Q.
  const int64_t n = n_prev_;
  auto Wf = Wf_.topRows(n);
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
  T.topLeftCorner(k, k) = c2 * (Pf_.transpose() * Pf_).cast<double>();  // Pf_ = W Q
  Eigen::VectorXd wb(m);
  wb.head(k) = wq.cast<double>();
  if (extend) {
    u /= un;
    Wuf_.noalias() = Wf * u;
    T.topRightCorner(k, 1) = c2 * (Pf_.transpose() * Wuf_).cast<double>();
    T.bottomLeftCorner(1, k) = T.topRightCorner(k, 1).transpose();
    T(k, k) = c2 * static_cast<double>(Wuf_.squaredNorm());
    wb(k) = static_cast<double>(w.dot(u));
  }
  T.noalias() += wb * wb.transpose();
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(T);
  const Eigen::MatrixXd Zr = es.eigenvectors().rightCols(std::min(r, m));
  return (wb.transpose() * Zr).squaredNorm() / total;
}

}  // namespace vq::eviction

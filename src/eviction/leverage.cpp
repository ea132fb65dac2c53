#include "eviction/leverage.hpp"

#include <Eigen/Dense>
#include <algorithm>

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

#include "codecs/gear_codec.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "codecs/bit_pack.hpp"
#include "coding/quantizer.hpp"
#include "transform/method_common.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/tensor.hpp"

namespace vq::codecs {

namespace {

void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFFu);
  p[1] = static_cast<uint8_t>(v >> 8);
}
uint16_t get_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

}  // namespace

GearCodec::GearCodec(int64_t dim, int bits, int64_t rank, double ratio, int64_t chunk, int64_t fit)
    : RowCodec(dim), bits_(bits), chunk_(chunk), fit_(fit) {
  VQ_CHECK(dim >= 1 && dim <= 65536, InvalidArgument, "gear: head_dim = ", dim,
           " is out of range; allowed [1, 65536] (outlier indices are 16-bit)");
  VQ_CHECK(bits >= 1 && bits <= coding::kMaxQuantBits, InvalidArgument, "gear: bits = ", bits,
           " is outside [1, ", coding::kMaxQuantBits, "]");
  VQ_CHECK(rank >= 0 && ratio >= 0.0 && ratio <= 1.0, InvalidArgument, "gear: rank = ", rank,
           " must be >= 0 and outlier_ratio = ", ratio, " in [0, 1]");
  VQ_CHECK(chunk >= 1 && fit >= 1, InvalidArgument, "gear: chunk_tokens = ", chunk,
           " and fit_tokens = ", fit, " must both be >= 1");
  r_ = std::min(rank, dim);
  outliers_ = std::min<int64_t>(
      dim, static_cast<int64_t>(std::floor(ratio * static_cast<double>(dim) + 0.5)));
}

void GearCodec::encode(const float* rows, int64_t n, uint8_t* params, uint8_t* codes) {
  VQ_CHECK(n >= 1 && n <= chunk_, InvalidArgument, "gear: a chunk of ", n,
           " rows; allowed [1, chunk_tokens = ", chunk_, "]");
  const int64_t D = dim(), rb = row_bytes(), m = outliers_;
  const int64_t a_at = 8 + 4 * m, q_at = a_at + 2 * r_;
  std::vector<float> dense(rows, rows + n * D), deq(static_cast<size_t>(n * D));
  std::vector<uint8_t> q(static_cast<size_t>(D));
  std::vector<int64_t> idx(static_cast<size_t>(D));
  for (int64_t t = 0; t < n; ++t) {
    const float* x = rows + t * D;
    float* xd = dense.data() + t * D;
    uint8_t* row = codes + t * rb;
    // 1. outliers of this row
    std::iota(idx.begin(), idx.end(), int64_t{0});
    auto larger = [&](int64_t a, int64_t b) {
      const float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
      return fa != fb ? fa > fb : a < b;
    };
    if (m > 0 && m < D) std::nth_element(idx.begin(), idx.begin() + m, idx.end(), larger);
    std::sort(idx.begin(), idx.begin() + m);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t c = idx[static_cast<size_t>(i)];
      put_u16(row + 8 + 4 * i, static_cast<uint16_t>(c));
      put_u16(row + 8 + 4 * i + 2, fp32_to_fp16(x[c]));
      xd[c] = 0.0f;
    }
    // 2. per-row affine quantization of the dense part
    const coding::AffineParams p = coding::fit_affine(xd, D, bits_);
    coding::quantize_affine(xd, D, p, bits_, q.data());
    coding::dequantize_affine(q.data(), D, p, deq.data() + t * D);
    std::memcpy(row, &p.min, 4);
    std::memcpy(row + 4, &p.scale, 4);
    pack_fixed(q.data(), D, bits_, row + q_at);
    if (r_ > 0) std::memset(row + a_at, 0, static_cast<size_t>(2 * r_));
  }
  // 3. rank-k factorization of the chunk's quantization residual
  const int64_t k = std::min(r_, n);
  if (r_ == 0) return;
  std::memset(params, 0, static_cast<size_t>(chunk_param_bytes(n)));
  if (k == 0) return;
  using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const RowMatF> Dm(dense.data(), n, D), Qm(deq.data(), n, D);
  const Eigen::MatrixXd R = (Dm - Qm).cast<double>();
  Eigen::JacobiSVD<Eigen::MatrixXd> svd(R, Eigen::ComputeThinU | Eigen::ComputeThinV);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j)
      put_u16(codes + t * rb + a_at + 2 * j,
              fp32_to_fp16(static_cast<float>(svd.matrixU()(t, j) * svd.singularValues()(j))));
  for (int64_t j = 0; j < k; ++j)
    for (int64_t c = 0; c < D; ++c)
      put_u16(params + 2 * (j * D + c), fp32_to_fp16(static_cast<float>(svd.matrixV()(c, j))));
}

void GearCodec::decode(const uint8_t* params, const uint8_t* codes, int64_t n, float* out) const {
  const int64_t D = dim(), rb = row_bytes(), m = outliers_;
  const int64_t a_at = 8 + 4 * m, q_at = a_at + 2 * r_;
  std::vector<float> B(static_cast<size_t>(r_ * D));
  for (int64_t i = 0; i < r_ * D; ++i)
    B[static_cast<size_t>(i)] = fp16_to_fp32(get_u16(params + 2 * i));
  std::vector<uint8_t> q(static_cast<size_t>(D));
  for (int64_t t = 0; t < n; ++t) {
    const uint8_t* row = codes + t * rb;
    float* y = out + t * D;
    coding::AffineParams p;
    std::memcpy(&p.min, row, 4);
    std::memcpy(&p.scale, row + 4, 4);
    unpack_fixed(row + q_at, D, bits_, q.data());
    coding::dequantize_affine(q.data(), D, p, y);
    for (int64_t j = 0; j < r_; ++j) {
      const float a = fp16_to_fp32(get_u16(row + a_at + 2 * j));
      if (a == 0.0f) continue;
      const float* bj = B.data() + j * D;
      for (int64_t c = 0; c < D; ++c) y[c] += a * bj[c];
    }
    for (int64_t i = 0; i < m; ++i) {
      const int64_t c = get_u16(row + 8 + 4 * i);
      if (c < D) y[c] = fp16_to_fp32(get_u16(row + 8 + 4 * i + 2));
    }
  }
}

std::unique_ptr<store::RowCodec> make_gear_row_codec(const CacheConfig& c,
                                                     const store::StreamInfo& s) {
  const transform::TransformSettings t = transform::pca_transform_settings(c, s.head_dim);
  return std::make_unique<GearCodec>(s.head_dim, static_cast<int>(c.get_int("bits")),
                                     c.get_int("rank"), c.get_float("outlier_ratio"),
                                     t.chunk_tokens, t.fit_tokens);
}

}  // namespace vq::codecs

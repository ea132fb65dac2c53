#include "transform/pca_coder.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "coding/bit_allocation.hpp"
#include "coding/gram.hpp"
#include "coding/latent_kernels.hpp"
#include "veloxquant/errors.hpp"

namespace vq::transform {

namespace {

constexpr uint8_t kPcaFormatV1 = 1;
constexpr uint8_t kPcaFormatCalibrated = 2;

using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace

const char* alloc_rule_name(AllocRule r) {
  switch (r) {
    case AllocRule::Dp:
      return "dp";
    case AllocRule::Waterfill:
      return "waterfill";
    case AllocRule::Uniform:
      return "uniform";
    case AllocRule::Split:
      return "split";
  }
  return "?";
}

std::vector<int> allocate_bits(const std::vector<double>& variances, const PcaSettings& s) {
  const int64_t r = static_cast<int64_t>(variances.size());
  switch (s.rule) {
    case AllocRule::Dp:
      return coding::dp_allocate_bits(variances, s.bit_budget, s.bit_choices, s.beta);
    case AllocRule::Waterfill:
      return coding::waterfill_allocate_bits(variances, s.bit_budget, s.bit_choices, s.beta);
    case AllocRule::Uniform:
      return coding::uniform_allocate_bits(r, s.bit_budget, coding::kMaxQuantBits);
    case AllocRule::Split:
      return coding::split_allocate_bits(r, s.bit_budget, coding::kMaxQuantBits);
  }
  return {};
}

PcaModel fit_pca_model(const float* X, int64_t n, int64_t D, const PcaSettings& s) {
  VQ_CHECK(n >= 1 && D >= 1, InvalidArgument, "fit_pca_model: n = ", n, ", D = ", D,
           " must both be >= 1");
  PcaModel m;
  m.D = D;
  Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> Xf(X, n,
                                                                                             D);
  // Column sums in double, rows in order (the same additions as Eigen's colwise().sum() here),
  // walked row by row so the loads are contiguous and the D accumulators vectorize.
  Eigen::RowVectorXd mu = Eigen::RowVectorXd::Zero(D);
  {
    double* acc = mu.data();
    for (int64_t d = 0; d < D; ++d) acc[d] = static_cast<double>(X[d]);
    for (int64_t i = 1; i < n; ++i) {
      const float* row = X + i * D;
      for (int64_t d = 0; d < D; ++d) acc[d] += static_cast<double>(row[d]);
    }
    mu /= static_cast<double>(n);
  }
  // The mean the decoder will add back is the fp32 one: center with exactly that.
  m.mean.resize(static_cast<size_t>(D));
  for (int64_t d = 0; d < D; ++d) m.mean[static_cast<size_t>(d)] = static_cast<float>(mu(d));
  const Eigen::Map<const Eigen::RowVectorXf> meanf(m.mean.data(), D);
  // Covariance of the centered rows (lower triangle). Short fits (n < 2 kCovBlock rows: every
  // cache stream's fit_tokens window at head_dim <= 128, and any fit with fewer rows than
  // dimensions, where the null directions must come out at zero) take fp64 products. Long fits
  // take fp32 products over blocks of kCovBlock rows (coding::gram_lower, about 6x the speed of
  // Eigen's fp64 product here), each block's triangle added to an fp64 sum in block order: a block
  // sums at most kCovBlock products, so its rounding stays near fp32's epsilon relative to the
  // block sum (measured 5e-8 of the fp64 product's norm on realistic keys). The rows are first
  // scaled by a power of two that brings the largest magnitude into [1, 2) (exact, undone in fp64),
  // so that the fp32 products can neither overflow nor underflow where the values are extreme.
  // Fixed block boundaries: the same bits for the same rows.
  //
  // The eigendecomposition follows the covariance's precision: fp64 for short fits; fp32 for long
  // ones (about 1.6x the speed; the covariance is only fp32-accurate there, and the solver's own
  // error, about fp32's epsilon times the largest variance, is of the same size), on the scaled
  // covariance, whose entries stay below 4, and the variances are scaled back in fp64.
  constexpr int64_t kCovBlock = 256;
  Eigen::VectorXd evals;  // ascending
  Eigen::MatrixXd evecs;  // columns
  bool solved = false;
  if (n < 2 * kCovBlock) {
    Eigen::MatrixXd C = Eigen::MatrixXd::Zero(D, D);
    const RowMatD Xc = (Xf.rowwise() - meanf).cast<double>();
    C.selfadjointView<Eigen::Lower>().rankUpdate(Xc.transpose(), 1.0 / static_cast<double>(n));
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es;
    es.compute(C);  // reads the lower triangle only
    solved = es.info() == Eigen::Success;
    if (solved) {
      evals = es.eigenvalues();
      evecs = es.eigenvectors();
    }
  } else {
    RowMatF Xc = Xf.rowwise() - meanf;
    const float amax = Xc.cwiseAbs().maxCoeff();
    // (a difference that overflowed stays inf: the eigensolver then refuses, as on the fp64 path)
    const int e = amax > 0.0f && std::isfinite(amax) ? std::ilogb(amax) : 0;
    Xc *= std::ldexp(1.0f, -e);
    std::vector<float> Gb(static_cast<size_t>(D * D));
    std::vector<double> sum(static_cast<size_t>(D * D), 0.0);  // row-major: contiguous adds
    for (int64_t s0 = 0; s0 < n; s0 += kCovBlock) {
      coding::gram_lower(Xc.data() + s0 * D, std::min(kCovBlock, n - s0), D, Gb.data());
      for (int64_t i = 0; i < D; ++i) {
        double* si = sum.data() + i * D;
        const float* gi = Gb.data() + i * D;
        for (int64_t j = 0; j <= i; ++j) si[j] += static_cast<double>(gi[j]);
      }
    }
    Eigen::MatrixXf Cs = Eigen::MatrixXf::Zero(D, D);  // covariance of the scaled rows
    for (int64_t i = 0; i < D; ++i)
      for (int64_t j = 0; j <= i; ++j)
        Cs(i, j) = static_cast<float>(sum[static_cast<size_t>(i * D + j)] / static_cast<double>(n));
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXf> es;
    es.compute(Cs);  // reads the lower triangle only
    solved = es.info() == Eigen::Success;
    if (solved) {
      evals = es.eigenvalues().cast<double>() * std::ldexp(1.0, 2 * e);
      evecs = es.eigenvectors().cast<double>();
    }
  }
  VQ_CHECK(solved, InvalidArgument, "fit_pca_model: the eigensolver did not converge (D = ", D,
           ", n = ", n, ")");
  const int64_t r = std::min(n, D);
  m.variances.resize(static_cast<size_t>(r));
  for (int64_t j = 0; j < r; ++j)  // eigenvalues come ascending: take them from the top
    m.variances[static_cast<size_t>(j)] = std::max(evals(D - 1 - j), 0.0);
  m.bits = allocate_bits(m.variances, s);
  for (int64_t j = 0; j < r; ++j) {
    const int b = m.bits[static_cast<size_t>(j)];
    if (b == 0) continue;
    Eigen::VectorXd v = evecs.col(D - 1 - j);
    // Deterministic sign: the entry of largest magnitude (first on ties) is positive.
    Eigen::Index arg = 0;
    v.cwiseAbs().maxCoeff(&arg);
    if (v(arg) < 0) v = -v;
    for (int64_t d = 0; d < D; ++d) m.basis.push_back(static_cast<float>(v(d)));
    m.kept_bits.push_back(b);
  }
  return m;
}

PcaRowCoder::PcaRowCoder(int64_t D, PcaSettings settings, StreamId id)
    : RowCoder(D), settings_(std::move(settings)), id_(id) {}

int64_t PcaRowCoder::external_bytes() const {
  if (!fitted_ || !calibrated_) return 0;
  // mean + kept basis rows (fp32); with quant=calibrated also each kept component's (lo, hi)
  return 4 * width() * (1 + model_.kept()) + (fixed_ranges_ ? 8 * model_.kept() : 0);
}

PcaModel PcaRowCoder::calibrated_model(const CalibrationEntry& e, const std::vector<int>& bits,
                                       bool fixed) {
  const int64_t D = width();
  PcaModel m;
  m.D = D;
  m.variances = e.variances;
  m.bits = bits;
  m.mean = e.mean;
  fixed_params_.clear();
  for (int64_t j = 0; j < D; ++j) {
    const int b = bits[static_cast<size_t>(j)];
    if (b == 0) continue;
    m.basis.insert(m.basis.end(), e.basis.begin() + j * D, e.basis.begin() + (j + 1) * D);
    m.kept_bits.push_back(b);
    if (fixed) {
      const size_t t = static_cast<size_t>(j * kCalibWidths + b);
      const float lo = e.range_lo[t], hi = e.range_hi[t];
      fixed_params_.push_back(coding::AffineParams{
          lo,
          std::max((hi - lo) / static_cast<float>(coding::quant_levels(b)), coding::kMinScale)});
    }
  }
  calibrated_ = true;
  fixed_ranges_ = fixed;
  return m;
}

void PcaRowCoder::set_model(PcaModel m) {
  model_ = std::move(m);
  const int64_t k = model_.kept();
  order_.resize(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) order_[static_cast<size_t>(j)] = j;
  std::stable_sort(order_.begin(), order_.end(), [&](int64_t a, int64_t b) {
    return model_.kept_bits[static_cast<size_t>(a)] < model_.kept_bits[static_cast<size_t>(b)];
  });
  slot_.assign(static_cast<size_t>(k), 0);
  groups_.clear();
  for (int64_t p = 0; p < k; ++p) {
    const int64_t j = order_[static_cast<size_t>(p)];
    slot_[static_cast<size_t>(j)] = p;
    const int w = model_.kept_bits[static_cast<size_t>(j)];
    if (groups_.empty() || groups_.back().width != w) groups_.push_back(Group{w, p, 0});
    ++groups_.back().count;
  }
  params_.resize(static_cast<size_t>(k));
  basis_t_.resize(static_cast<size_t>(k * width()));
  for (int64_t j = 0; j < k; ++j)
    for (int64_t d = 0; d < width(); ++d)
      basis_t_[static_cast<size_t>(d * k + j)] = model_.basis[static_cast<size_t>(j * width() + d)];
  fitted_ = true;
}

void PcaRowCoder::fit(const float* rows, int64_t n, EncodedSection& sec) {
  assert(!fitted_);
  const int64_t D = width();
  if (settings_.calibration) {
    const Calibration& cal = *settings_.calibration;
    const int64_t idx = cal.entry_index(id_.layer, id_.head, id_.kv);
    const CalibrationEntry& e = cal.entries[static_cast<size_t>(idx)];
    std::vector<int> bits;
    if (settings_.measured_alloc) {
      bits =
          coding::dp_allocate_bits_table(settings_.quant_calibrated ? e.dist_range : e.dist_chunk,
                                         kCalibWidths, settings_.bit_budget, settings_.bit_choices);
    } else {
      bits = allocate_bits(e.variances, settings_);
    }
    auto& out = sec.bytes;
    const size_t start = out.size();
    coding::put_u8(out, kPcaFormatCalibrated);
    coding::put_varint(out, static_cast<uint64_t>(D));
    for (int i = 0; i < 8; ++i)
      coding::put_u8(out, static_cast<uint8_t>(settings_.calibration_id >> (8 * i)));
    coding::put_varint(out, static_cast<uint64_t>(idx));
    coding::put_u8(out, settings_.quant_calibrated ? 1 : 0);
    for (int b : bits) coding::put_u8(out, static_cast<uint8_t>(b));
    sec.breakdown.params += static_cast<int64_t>(out.size() - start);
    set_model(calibrated_model(e, bits, settings_.quant_calibrated));
    external_entry_ = idx;
    return;
  }
  assert(n >= 1);
  PcaModel m = fit_pca_model(rows, n, D, settings_);
  auto& out = sec.bytes;
  const size_t start = out.size();
  coding::put_u8(out, kPcaFormatV1);
  coding::put_varint(out, static_cast<uint64_t>(D));
  coding::put_varint(out, static_cast<uint64_t>(m.kept()));
  for (int b : m.kept_bits) coding::put_u8(out, static_cast<uint8_t>(b));
  const size_t params_end = out.size();
  coding::put_f32(out, m.mean.data(), m.mean.size());
  coding::put_f32(out, m.basis.data(), m.basis.size());
  sec.breakdown.params += static_cast<int64_t>(params_end - start);
  sec.breakdown.basis += static_cast<int64_t>(out.size() - params_end);
  set_model(std::move(m));
}

void PcaRowCoder::read_header(coding::ByteReader& in) {
  const int64_t D = width();
  const uint8_t format = in.u8("kvtc section format");
  VQ_CHECK(format == kPcaFormatV1 || format == kPcaFormatCalibrated, FormatError,
           "kvtc section: unknown format ", int(format), " (this build reads formats ",
           int(kPcaFormatV1), " and ", int(kPcaFormatCalibrated), ")");
  const uint64_t d = in.varint("kvtc section head_dim", UINT64_MAX);
  VQ_CHECK(d == static_cast<uint64_t>(D), FormatError, "kvtc section: head_dim ", d,
           " does not match the block's head_dim ", D);
  if (format == kPcaFormatCalibrated) {
    in.need(8, "kvtc section calibration id");
    uint64_t id = 0;
    for (int i = 0; i < 8; ++i)
      id |= static_cast<uint64_t>(in.u8("kvtc section calibration id")) << (8 * i);
    VQ_CHECK(settings_.calibration != nullptr, FormatError,
             "kvtc section: references calibration id ", id,
             " but this decoder has no calibration loaded (basis=local)");
    VQ_CHECK(id == settings_.calibration_id, FormatError,
             "kvtc section: references calibration id ", id, " but the loaded calibration has id ",
             settings_.calibration_id);
    const Calibration& cal = *settings_.calibration;
    VQ_CHECK(cal.head_dim == D, FormatError, "kvtc section: the calibration's head_dim ",
             cal.head_dim, " differs from ", D);
    const uint64_t idx = in.varint("kvtc section calibration entry", cal.entries.size() - 1);
    if (id_.n_heads > 0) {  // a cache stream knows which entry it must use
      const int64_t want = cal.entry_index(id_.layer, id_.head, id_.kv);
      VQ_CHECK(idx == static_cast<uint64_t>(want), FormatError, "kvtc section: calibration entry ",
               idx, " does not belong to this stream (layer ", id_.layer, ", head ", id_.head, ", ",
               id_.kv == 0 ? "keys" : "values", " use entry ", want, ")");
    }
    external_entry_ = static_cast<int64_t>(idx);
    const uint8_t q = in.u8("kvtc section quant mode");
    VQ_CHECK(q <= 1, FormatError, "kvtc section: quant mode ", int(q),
             "; allowed 0 (chunk) or 1 (calibrated)");
    in.need(static_cast<size_t>(D), "kvtc section bit widths");
    std::vector<int> bits(static_cast<size_t>(D));
    for (int64_t j = 0; j < D; ++j) {
      const uint8_t b = in.u8("kvtc section bit width");
      VQ_CHECK(b <= coding::kMaxQuantBits, FormatError, "kvtc section: component ", j,
               " has bit width ", int(b), "; allowed [0, ", coding::kMaxQuantBits, "]");
      bits[static_cast<size_t>(j)] = b;
    }
    set_model(calibrated_model(cal.entries[static_cast<size_t>(idx)], bits, q == 1));
    return;
  }
  const int64_t k =
      static_cast<int64_t>(in.varint("kvtc section component count", static_cast<uint64_t>(D)));
  PcaModel m;
  m.D = D;
  in.need(static_cast<size_t>(k), "kvtc section bit widths");
  for (int64_t j = 0; j < k; ++j) {
    const uint8_t b = in.u8("kvtc section bit width");
    VQ_CHECK(b >= 1 && b <= coding::kMaxQuantBits, FormatError, "kvtc section: component ", j,
             " has bit width ", int(b), "; allowed [1, ", coding::kMaxQuantBits, "]");
    m.kept_bits.push_back(b);
  }
  // Check the sizes against the bytes present before allocating anything.
  in.need(4 * static_cast<size_t>(D) * static_cast<size_t>(1 + k), "kvtc section mean and basis");
  m.mean.resize(static_cast<size_t>(D));
  in.f32(m.mean.data(), m.mean.size(), "kvtc section mean");
  m.basis.resize(static_cast<size_t>(k * D));
  in.f32(m.basis.data(), m.basis.size(), "kvtc section basis");
  set_model(std::move(m));
}

void PcaRowCoder::ensure_scratch(int64_t n, bool centered_rows) {
  const int64_t D = width(), k = model_.kept();
  if (centered_rows && static_cast<int64_t>(xc_.size()) < n * D)
    xc_.resize(static_cast<size_t>(n * D));
  if (static_cast<int64_t>(lat_.size()) < n * k) lat_.resize(static_cast<size_t>(n * k));
  if (static_cast<int64_t>(codes_.size()) < n * k) codes_.resize(static_cast<size_t>(n * k));
}

void PcaRowCoder::encode_chunk(const float* rows, int64_t n, EncodedSection& sec) {
  assert(fitted_ && n >= 1);
  const int64_t D = width(), k = model_.kept();
  ensure_scratch(n, true);
  auto& out = sec.bytes;
  const size_t start = out.size();
  coding::put_varint(out, static_cast<uint64_t>(n));
  if (k > 0) {
    Eigen::Map<const RowMatF> X(rows, n, D);
    Eigen::Map<RowMatF> Xc(xc_.data(), n, D);
    const Eigen::Map<const Eigen::RowVectorXf> mean(model_.mean.data(), D);
    Xc = X.rowwise() - mean;
    // latents [n, k] on the blocked kernel (a row's latents depend on that row only), then
    // component-major [k, n] for the per-component quantizers
    if (static_cast<int64_t>(latT_.size()) < n * k) latT_.resize(static_cast<size_t>(n * k));
    coding::project_rows(xc_.data(), n, D, basis_t_.data(), k, latT_.data());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < k; ++j)
        lat_[static_cast<size_t>(j * n + t)] = latT_[static_cast<size_t>(t * k + j)];
    for (int64_t j = 0; j < k; ++j) {
      const int b = model_.kept_bits[static_cast<size_t>(j)];
      const float* lj = lat_.data() + j * n;
      // Fixed ranges clamp what falls outside (quantize_affine clips the codes).
      const coding::AffineParams p =
          fixed_ranges_ ? fixed_params_[static_cast<size_t>(j)] : coding::fit_affine(lj, n, b);
      params_[static_cast<size_t>(j)] = p;
      coding::quantize_affine(lj, n, p, b, codes_.data() + slot_[static_cast<size_t>(j)] * n);
      if (!fixed_ranges_) {
        coding::put_f32(out, &p.min, 1);
        coding::put_f32(out, &p.scale, 1);
      }
    }
  }
  sec.breakdown.params += static_cast<int64_t>(out.size() - start);
  for (const Group& g : groups_) {
    const coding::StreamSizes sz =
        enc_.encode(codes_.data() + g.first * n, static_cast<size_t>(g.count * n), g.width, out,
                    settings_.entropy, static_cast<size_t>(n));
    sec.breakdown.table += sz.overhead;
    sec.breakdown.payload += sz.payload;
    sec.fixed_width_payload += sz.fixed_width_payload;
  }
}

int64_t PcaRowCoder::decode_chunk(coding::ByteReader& in, int64_t max_rows, float* rows) {
  VQ_CHECK(fitted_, FormatError, "kvtc section: chunk before header");
  const int64_t D = width(), k = model_.kept();
  const int64_t n =
      static_cast<int64_t>(in.varint("kvtc chunk token count", static_cast<uint64_t>(max_rows)));
  VQ_CHECK(n >= 1, FormatError, "kvtc chunk: token count 0");
  Eigen::Map<RowMatF> out(rows, n, D);
  const Eigen::Map<const Eigen::RowVectorXf> mean(model_.mean.data(), D);
  if (k == 0) {
    out.rowwise() = mean;
    return n;
  }
  if (fixed_ranges_) {
    for (int64_t j = 0; j < k; ++j)
      params_[static_cast<size_t>(j)] = fixed_params_[static_cast<size_t>(j)];
  } else {
    // (min, scale) per component, read in one call.
    mp_.resize(static_cast<size_t>(2 * k));
    in.f32(mp_.data(), mp_.size(), "kvtc chunk quantizer params");
    for (int64_t j = 0; j < k; ++j) {
      const float lo = mp_[static_cast<size_t>(2 * j)], sc = mp_[static_cast<size_t>(2 * j + 1)];
      VQ_CHECK(sc > 0.0f, FormatError, "kvtc chunk: component ", j, " has scale ", sc,
               "; must be > 0");
      params_[static_cast<size_t>(j)] = coding::AffineParams{lo, sc};
    }
  }
  ensure_scratch(n, false);
  // Any stream mode is accepted here (mode 4 included), whatever the encoder's entropy policy.
  // All the chunk's streams in one call: HuffmanDecoder::decode_streams overlaps the table
  // lookups of two long streams at a time.
  streams_.clear();
  for (const Group& g : groups_)
    streams_.push_back(coding::HuffmanDecoder::StreamSpec{
        codes_.data() + g.first * n, static_cast<size_t>(g.count * n), g.width});
  dec_.decode_streams(in, streams_.data(), streams_.size());
  for (int64_t j = 0; j < k; ++j)
    coding::dequantize_affine(codes_.data() + slot_[static_cast<size_t>(j)] * n, n,
                              params_[static_cast<size_t>(j)], lat_.data() + j * n);
  // mean + sum_j latent_j basis_j per row, over the chunk's surviving components only, summed
  // in component order (coding/latent_kernels.hpp): the same floats as the resident codec.
  coding::unproject_rows(lat_.data(), k, n, model_.basis.data(), model_.mean.data(), D, rows);
  // Branch-free finiteness scan (exponent bits all ones = NaN or Inf); vectorizes, unlike an
  // early-exit test per value.
  uint32_t bad = 0;
  for (int64_t i = 0; i < n * D; ++i) {
    uint32_t bits;
    std::memcpy(&bits, rows + i, 4);
    bad |= static_cast<uint32_t>((bits & 0x7F800000u) == 0x7F800000u);
  }
  VQ_CHECK(bad == 0, FormatError,
           "kvtc chunk: decoded values are not finite (corrupt parameters or basis)");
  return n;
}

}  // namespace vq::transform

// .vqcal files: fitting, measuring, writing and (trusting nothing) reading a KVTC calibration.
// Layout: docs/format.md, "Calibration files".
#include "veloxquant/calibration.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "coding/byte_io.hpp"
#include "coding/checksum.hpp"
#include "coding/quantizer.hpp"
#include "core/file_io.hpp"
#include "veloxquant/errors.hpp"

namespace vq {

namespace {

constexpr uint8_t kMagic[8] = {0x89, 'V', 'Q', 'C', 'A', 'L', '\r', '\n'};
constexpr uint16_t kVersion = 2;      // 2 adds model_id; version 1 files are still read
constexpr size_t kFixedBytesV1 = 48;  // magic .. n_entries
constexpr size_t kFixedBytes = 56;    // magic .. n_entries, model_id
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = kCalibrationMaxHeadDim;
constexpr int64_t kMaxChunk = kCalibrationMaxChunk;
constexpr int64_t kMaxTokens = int64_t{1} << 40;
/// |B B^T - I| above this (per entry) means the stored basis is not orthonormal. fp32 rows of
/// unit length carry ~1e-7 relative rounding per entry; 1e-3 leaves room for D = 1024.
constexpr double kOrthoTol = 1e-3;

using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

uint64_t entry_bytes(uint64_t D) {
  // mean, basis (f32); variances, two tables (f64); ranges lo/hi for b = 1..8 (f32).
  return 4 * D + 4 * D * D + 8 * D + 2 * 8 * D * kCalibWidths + 2 * 4 * D * 8;
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_f64(std::vector<uint8_t>& out, const double* v, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint64_t bits;
    std::memcpy(&bits, &v[i], 8);
    put_u64(out, bits);
  }
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
/// n f64 values, each finite and >= 0 (what every f64 field of the file holds).
void get_f64_nonneg(coding::ByteReader& in, double* out, size_t n, const char* what,
                    int64_t entry) {
  in.need(8 * n, what);
  const uint8_t* p = in.cursor();
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = get_u64(p + 8 * i);
    std::memcpy(&out[i], &bits, 8);
    VQ_CHECK(std::isfinite(out[i]) && out[i] >= 0.0, FormatError, "calibration entry ", entry, ": ",
             what, "[", i, "] = ", out[i], " must be finite and >= 0");
  }
  in.skip(8 * n, what);
}

/// Every float of a stored array finite and within +-1e30, so that sums and a range's quantizer
/// step (hi - lo) / (2^b - 1) stay finite.
void check_bounded(const float* x, size_t n, const char* what, size_t entry) {
  for (size_t i = 0; i < n; ++i)
    VQ_CHECK(std::isfinite(x[i]) && std::fabs(x[i]) <= 1e30f, FormatError, "calibration entry ",
             entry, ": ", what, "[", i, "] = ", x[i], " must be finite and within +-1e30");
}

void check_entry_shape(const CalibrationEntry& e, int64_t D, size_t idx) {
  const size_t d = static_cast<size_t>(D), t = d * kCalibWidths;
  VQ_CHECK(e.mean.size() == d && e.basis.size() == d * d && e.variances.size() == d &&
               e.dist_chunk.size() == t && e.dist_range.size() == t && e.range_lo.size() == t &&
               e.range_hi.size() == t,
           InvalidArgument, "calibration entry ", idx, ": arrays do not match head_dim ", D);
}

/// Squared error of quantizing x[0:n) with params p at `bits` bits, summed.
double quant_sq_error(const float* x, int64_t n, coding::AffineParams p, int bits,
                      std::vector<uint8_t>& codes, std::vector<float>& y) {
  codes.resize(static_cast<size_t>(n));
  y.resize(static_cast<size_t>(n));
  coding::quantize_affine(x, n, p, bits, codes.data());
  coding::dequantize_affine(codes.data(), n, p, y.data());
  double e = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - y[static_cast<size_t>(i)];
    e += d * d;
  }
  return e;
}

}  // namespace

const char* rope_mode_name(RopeMode r) {
  return r == RopeMode::Pre ? "pre" : "post";
}

const std::vector<double>& calibration_clip_grid() {
  static const std::vector<double> g{1.0, 0.9,  0.8, 0.7,  0.6, 0.5,  0.45,
                                     0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1};
  return g;
}

int64_t Calibration::entry_index(int64_t layer, int64_t head, int kv) const {
  VQ_CHECK(layer >= 0 && layer < n_layers, InvalidArgument, "calibration: layer ", layer,
           " is outside [0, n_layers = ", n_layers, ")");
  VQ_CHECK(head >= 0 && head < n_kv_heads, InvalidArgument, "calibration: KV head ", head,
           " is outside [0, n_kv_heads = ", n_kv_heads, ")");
  VQ_CHECK(kv == 0 || kv == 1, InvalidArgument, "calibration: kv = ", kv, " must be 0 or 1");
  const int64_t g = shared_heads ? 0 : head;
  return (layer * groups() + g) * 2 + kv;
}

const CalibrationEntry& Calibration::entry(int64_t layer, int64_t head, int kv) const {
  const int64_t i = entry_index(layer, head, kv);
  VQ_CHECK(i < static_cast<int64_t>(entries.size()), InvalidArgument, "calibration: entry ", i,
           " missing (", entries.size(), " entries)");
  return entries[static_cast<size_t>(i)];
}

std::vector<uint8_t> Calibration::serialize() const {
  VQ_CHECK(n_layers >= 1 && n_layers <= kMaxLayers && n_kv_heads >= 1 && n_kv_heads <= kMaxHeads &&
               head_dim >= 1 && head_dim <= kMaxHeadDim && chunk_tokens >= 1 &&
               chunk_tokens <= kMaxChunk && tokens >= 1 && tokens <= kMaxTokens,
           InvalidArgument, "calibration: n_layers = ", n_layers, ", n_kv_heads = ", n_kv_heads,
           ", head_dim = ", head_dim, ", chunk_tokens = ", chunk_tokens, ", tokens = ", tokens,
           " out of range; allowed [1, ", kMaxLayers, "], [1, ", kMaxHeads, "], [1, ", kMaxHeadDim,
           "], [1, ", kMaxChunk, "], [1, ", kMaxTokens, "]");
  const int64_t n_entries = n_layers * groups() * 2;
  VQ_CHECK(static_cast<int64_t>(entries.size()) == n_entries, InvalidArgument,
           "calibration: ", entries.size(),
           " entries, expected n_layers * groups * 2 = ", n_entries);
  const uint64_t D = static_cast<uint64_t>(head_dim);
  std::vector<uint8_t> out;
  out.reserve(kFixedBytes + static_cast<size_t>(n_entries) * entry_bytes(D) + 8);
  VQ_CHECK(format_version == kVersion || (format_version == 1 && model_id == 0), InvalidArgument,
           "calibration: format_version ", format_version, " with model_id ", model_id,
           " cannot be written (version ", kVersion, ", or 1 without a model_id)");
  out.insert(out.end(), kMagic, kMagic + 8);
  coding::put_u16(out, static_cast<uint16_t>(format_version));
  coding::put_u16(out, shared_heads ? 1 : 0);
  coding::put_u8(out, static_cast<uint8_t>(rope));
  for (int i = 0; i < 3; ++i) coding::put_u8(out, 0);
  put_u32(out, static_cast<uint32_t>(n_layers));
  put_u32(out, static_cast<uint32_t>(n_kv_heads));
  put_u32(out, static_cast<uint32_t>(head_dim));
  put_u32(out, static_cast<uint32_t>(chunk_tokens));
  put_u64(out, static_cast<uint64_t>(tokens));
  put_u64(out, static_cast<uint64_t>(n_entries));
  if (format_version >= 2) put_u64(out, model_id);
  for (size_t i = 0; i < entries.size(); ++i) {
    const CalibrationEntry& e = entries[i];
    check_entry_shape(e, head_dim, i);
    coding::put_f32(out, e.mean.data(), e.mean.size());
    coding::put_f32(out, e.basis.data(), e.basis.size());
    put_f64(out, e.variances.data(), e.variances.size());
    put_f64(out, e.dist_chunk.data(), e.dist_chunk.size());
    put_f64(out, e.dist_range.data(), e.dist_range.size());
    for (size_t j = 0; j < D; ++j)
      coding::put_f32(out, e.range_lo.data() + j * kCalibWidths + 1, kCalibWidths - 1);
    for (size_t j = 0; j < D; ++j)
      coding::put_f32(out, e.range_hi.data() + j * kCalibWidths + 1, kCalibWidths - 1);
  }
  put_u64(out, coding::xxh64(out.data(), out.size()));
  return out;
}

uint64_t Calibration::id() const {
  if (verified_id != 0) return verified_id;  // parse() checked it against the bytes
  const std::vector<uint8_t> b = serialize();
  return get_u64(b.data() + b.size() - 8);
}

bool Calibration::operator==(const Calibration& o) const {
  return n_layers == o.n_layers && n_kv_heads == o.n_kv_heads && head_dim == o.head_dim &&
         rope == o.rope && shared_heads == o.shared_heads && tokens == o.tokens &&
         chunk_tokens == o.chunk_tokens && model_id == o.model_id && entries == o.entries;
}

Calibration Calibration::parse(const uint8_t* data, size_t size) {
  VQ_CHECK(size >= kFixedBytesV1 + 8, FormatError, "calibration file: ", size,
           " bytes is shorter than the fixed header and checksum (", kFixedBytesV1 + 8,
           " bytes; truncated)");
  VQ_CHECK(std::memcmp(data, kMagic, 8) == 0, FormatError,
           "calibration file: bad magic (not a .vqcal file)");
  const uint16_t version = static_cast<uint16_t>(data[8] | (data[9] << 8));
  VQ_CHECK(version == 1 || version == kVersion, FormatError, "calibration file: version ", version,
           " is not supported (this build reads versions 1 and ", kVersion, ")");
  const size_t fixed = version == 1 ? kFixedBytesV1 : kFixedBytes;
  VQ_CHECK(size >= fixed + 8, FormatError, "calibration file: ", size,
           " bytes is shorter than the version ", version, " fixed header and checksum (",
           fixed + 8, " bytes; truncated)");
  const uint64_t stored = get_u64(data + size - 8);
  const uint64_t actual = coding::xxh64(data, size - 8);
  VQ_CHECK(stored == actual, FormatError, "calibration file: checksum mismatch (stored ", stored,
           ", computed ", actual, "): the file is corrupt or truncated");
  const uint16_t flags = static_cast<uint16_t>(data[10] | (data[11] << 8));
  VQ_CHECK((flags & ~1u) == 0, FormatError, "calibration file: flags = ", flags,
           "; only bit 0 (shared_heads) is defined");
  const uint8_t rope = data[12];
  VQ_CHECK(rope <= 1, FormatError, "calibration file: rope = ", int(rope),
           "; allowed 0 (post) or 1 (pre)");
  VQ_CHECK(data[13] == 0 && data[14] == 0 && data[15] == 0, FormatError,
           "calibration file: reserved bytes 13..15 must be 0");
  Calibration c;
  c.shared_heads = (flags & 1u) != 0;
  c.rope = static_cast<RopeMode>(rope);
  const uint32_t L = get_u32(data + 16), H = get_u32(data + 20), D = get_u32(data + 24),
                 chunk = get_u32(data + 28);
  const uint64_t tokens = get_u64(data + 32), n_entries = get_u64(data + 40);
  VQ_CHECK(L >= 1 && L <= kMaxLayers, FormatError, "calibration file: n_layers = ", L,
           " is outside [1, ", kMaxLayers, "]");
  VQ_CHECK(H >= 1 && H <= kMaxHeads, FormatError, "calibration file: n_kv_heads = ", H,
           " is outside [1, ", kMaxHeads, "]");
  VQ_CHECK(D >= 1 && D <= kMaxHeadDim, FormatError, "calibration file: head_dim = ", D,
           " is outside [1, ", kMaxHeadDim, "]");
  VQ_CHECK(chunk >= 1 && chunk <= kMaxChunk, FormatError,
           "calibration file: chunk_tokens = ", chunk, " is outside [1, ", kMaxChunk, "]");
  VQ_CHECK(tokens >= 1 && tokens <= static_cast<uint64_t>(kMaxTokens), FormatError,
           "calibration file: tokens = ", tokens, " is outside [1, ", kMaxTokens, "]");
  c.n_layers = L;
  c.n_kv_heads = H;
  c.head_dim = D;
  c.chunk_tokens = chunk;
  c.tokens = static_cast<int64_t>(tokens);
  const uint64_t expect_entries = static_cast<uint64_t>(L) * static_cast<uint64_t>(c.groups()) * 2;
  VQ_CHECK(n_entries == expect_entries, FormatError, "calibration file: n_entries = ", n_entries,
           " but n_layers * groups * 2 = ", expect_entries);
  // Sizes before allocation: the limits above keep this product far below 2^64.
  const uint64_t body = n_entries * entry_bytes(D);
  VQ_CHECK(size == fixed + body + 8, FormatError, "calibration file: ", size,
           " bytes, but the header implies ", fixed + body + 8, " (", n_entries, " entries of ",
           entry_bytes(D), " bytes)");
  c.model_id = version == 1 ? 0 : get_u64(data + kFixedBytesV1);
  c.format_version = version;
  coding::ByteReader in(data, size - 8, fixed);
  const size_t d = D, t = d * kCalibWidths;
  c.entries.resize(static_cast<size_t>(n_entries));
  for (size_t i = 0; i < c.entries.size(); ++i) {
    CalibrationEntry& e = c.entries[i];
    const int64_t ei = static_cast<int64_t>(i);
    e.mean.resize(d);
    in.f32(e.mean.data(), d, "calibration mean");
    check_bounded(e.mean.data(), d, "mean", i);
    e.basis.resize(d * d);
    in.f32(e.basis.data(), d * d, "calibration basis");
    check_bounded(e.basis.data(), d * d, "basis", i);
    e.variances.resize(d);
    get_f64_nonneg(in, e.variances.data(), d, "variances", ei);
    for (size_t j = 1; j < d; ++j)
      VQ_CHECK(e.variances[j] <= e.variances[j - 1], FormatError, "calibration entry ", i,
               ": variances are not descending at component ", j);
    e.dist_chunk.resize(t);
    get_f64_nonneg(in, e.dist_chunk.data(), t, "dist_chunk", ei);
    e.dist_range.resize(t);
    get_f64_nonneg(in, e.dist_range.data(), t, "dist_range", ei);
    e.range_lo.assign(t, 0.0f);
    e.range_hi.assign(t, 0.0f);
    for (size_t j = 0; j < d; ++j)
      in.f32(e.range_lo.data() + j * kCalibWidths + 1, kCalibWidths - 1, "calibration range_lo");
    for (size_t j = 0; j < d; ++j)
      in.f32(e.range_hi.data() + j * kCalibWidths + 1, kCalibWidths - 1, "calibration range_hi");
    check_bounded(e.range_lo.data(), t, "range_lo", i);
    check_bounded(e.range_hi.data(), t, "range_hi", i);
    for (size_t j = 0; j < d; ++j)
      for (int b = 1; b < kCalibWidths; ++b) {
        const size_t k = j * kCalibWidths + static_cast<size_t>(b);
        VQ_CHECK(e.range_hi[k] >= e.range_lo[k], FormatError, "calibration entry ", i,
                 ": component ", j, " at ", b, " bits has range [", e.range_lo[k], ", ",
                 e.range_hi[k], "]; range_hi must be >= range_lo");
      }
    const Eigen::Map<const RowMatF> B(e.basis.data(), D, D);
    const double err =
        (B.cast<double>() * B.cast<double>().transpose() - Eigen::MatrixXd::Identity(D, D))
            .cwiseAbs()
            .maxCoeff();
    VQ_CHECK(err <= kOrthoTol, FormatError, "calibration entry ", i,
             ": basis is not orthonormal (max |B B^T - I| = ", err, ", limit ", kOrthoTol, ")");
  }
  VQ_CHECK(in.at_end(), FormatError, "calibration file: ", in.remaining(),
           " bytes left over before the checksum");
  c.verified_id = stored;
  return c;
}

void Calibration::save(const std::string& path) const {
  const std::vector<uint8_t> b = serialize();
  // Never write a file that load() would refuse: run the reader's checks on the bytes first.
  try {
    (void)parse(b.data(), b.size());
  } catch (const FormatError& e) {
    VQ_THROW(InvalidArgument, "refusing to write calibration '", path, "': ", e.what());
  }
  // a temporary file beside the target, renamed over it once written: a concurrent reader sees
  // the old file or the new one, and a device, FIFO or symlink is written through, not replaced
  write_file_atomic(path, b);
}

Calibration Calibration::load(const std::string& path) {
  std::error_code ec;
  const auto fsize = std::filesystem::file_size(path, ec);
  VQ_CHECK(!ec, IoError, "cannot read calibration file '", path, "': ", ec.message());
  // Bounded by the largest file the header limits allow reading in one piece here.
  VQ_CHECK(fsize <= (uint64_t{1} << 34), FormatError, "calibration file '", path, "': ", fsize,
           " bytes exceeds the 16 GiB limit");
  std::ifstream f(path, std::ios::binary);
  VQ_CHECK(f.good(), IoError, "cannot open calibration file '", path, "'");
  std::vector<uint8_t> b(static_cast<size_t>(fsize));
  f.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(b.size()));
  VQ_CHECK(static_cast<uint64_t>(f.gcount()) == fsize, IoError, "failed reading '", path, "'");
  try {
    return parse(b.data(), b.size());
  } catch (const FormatError& e) {
    VQ_THROW(FormatError, "'", path, "': ", e.what());
  }
}

std::shared_ptr<const Calibration> load_calibration_shared(const std::string& path) {
  struct Slot {
    uintmax_t size = 0;
    std::filesystem::file_time_type mtime;
    std::shared_ptr<const Calibration> cal;
  };
  static std::mutex mu;
  static std::map<std::string, Slot> cache;
  std::error_code ec1, ec2;
  const auto size = std::filesystem::file_size(path, ec1);
  const auto mtime = std::filesystem::last_write_time(path, ec2);
  VQ_CHECK(!ec1 && !ec2, IoError, "cannot read calibration file '", path,
           "': ", (ec1 ? ec1 : ec2).message());
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(path);
  if (it != cache.end() && it->second.size == size && it->second.mtime == mtime)
    return it->second.cal;
  auto cal = std::make_shared<const Calibration>(Calibration::load(path));
  cache[path] = Slot{size, mtime, cal};
  return cal;
}

CalibrationEntry fit_calibration_entry(const float* X, int64_t n, int64_t D, int64_t chunk_tokens) {
  VQ_CHECK(n >= 1 && D >= 1 && chunk_tokens >= 1, InvalidArgument, "fit_calibration_entry: n = ", n,
           ", D = ", D, ", chunk_tokens = ", chunk_tokens, " must all be >= 1");
  CalibrationEntry e;
  const size_t d = static_cast<size_t>(D);
  Eigen::RowVectorXd mu = Eigen::RowVectorXd::Zero(D);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < D; ++j) mu(j) += static_cast<double>(X[i * D + j]);
  mu /= static_cast<double>(n);
  e.mean.resize(d);
  for (size_t j = 0; j < d; ++j) e.mean[j] = static_cast<float>(mu(static_cast<Eigen::Index>(j)));
  const Eigen::Map<const RowMatF> Xf(X, n, D);
  const Eigen::Map<const Eigen::RowVectorXf> meanf(e.mean.data(), D);
  const RowMatF Xcf = Xf.rowwise() - meanf;  // centered exactly as the encoder centers
  const RowMatD Xc = Xcf.cast<double>();
  Eigen::MatrixXd C = Eigen::MatrixXd::Zero(D, D);
  C.selfadjointView<Eigen::Lower>().rankUpdate(Xc.transpose(), 1.0 / static_cast<double>(n));
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(C);
  VQ_CHECK(es.info() == Eigen::Success, InvalidArgument,
           "fit_calibration_entry: the eigensolver did not converge (D = ", D, ")");
  e.basis.resize(d * d);
  e.variances.resize(d);
  for (int64_t j = 0; j < D; ++j) {
    Eigen::VectorXd v = es.eigenvectors().col(D - 1 - j);
    Eigen::Index arg = 0;
    v.cwiseAbs().maxCoeff(&arg);  // first largest entry made positive: deterministic sign
    if (v(arg) < 0) v = -v;
    for (int64_t k = 0; k < D; ++k)
      e.basis[static_cast<size_t>(j * D + k)] = static_cast<float>(v(k));
    e.variances[static_cast<size_t>(j)] = std::max(es.eigenvalues()(D - 1 - j), 0.0);
  }
  for (size_t j = 1; j < d; ++j) e.variances[j] = std::min(e.variances[j], e.variances[j - 1]);
  // Latents [D, n] in fp32, the product the encoder computes.
  const Eigen::Map<const RowMatF> B(e.basis.data(), D, D);
  RowMatF L(D, n);
  L.noalias() = B * Xcf.transpose();
  const size_t t = d * kCalibWidths;
  e.dist_chunk.assign(t, 0.0);
  e.dist_range.assign(t, 0.0);
  e.range_lo.assign(t, 0.0f);
  e.range_hi.assign(t, 0.0f);
  std::vector<uint8_t> codes;
  std::vector<float> y;
  const double inv_n = 1.0 / static_cast<double>(n);
  for (int64_t j = 0; j < D; ++j) {
    const float* lj = L.row(j).data();
    double* dc = e.dist_chunk.data() + j * kCalibWidths;
    double* dr = e.dist_range.data() + j * kCalibWidths;
    double ms = 0;
    float lo = lj[0], hi = lj[0];
    for (int64_t i = 0; i < n; ++i) {
      ms += static_cast<double>(lj[i]) * lj[i];
      lo = std::min(lo, lj[i]);
      hi = std::max(hi, lj[i]);
    }
    dc[0] = dr[0] = ms * inv_n;
    for (int b = 1; b < kCalibWidths; ++b) {
      double err = 0;
      for (int64_t s = 0; s < n; s += chunk_tokens) {
        const int64_t m = std::min(chunk_tokens, n - s);
        err += quant_sq_error(lj + s, m, coding::fit_affine(lj + s, m, b), b, codes, y);
      }
      dc[b] = err * inv_n;
      // Calibrated range: the clip factor of the grid with the least error (ties: the wider).
      const float levels = static_cast<float>(coding::quant_levels(b));
      double best = -1;
      for (double a : calibration_clip_grid()) {
        const float rlo = static_cast<float>(a * lo), rhi = static_cast<float>(a * hi);
        const coding::AffineParams p{rlo, std::max((rhi - rlo) / levels, coding::kMinScale)};
        const double ea = quant_sq_error(lj, n, p, b, codes, y);
        if (best < 0 || ea < best) {
          best = ea;
          e.range_lo[static_cast<size_t>(j * kCalibWidths + b)] = rlo;
          e.range_hi[static_cast<size_t>(j * kCalibWidths + b)] = rhi;
        }
      }
      dr[b] = best * inv_n;
    }
  }
  return e;
}

uint64_t model_digest(const std::string& checkpoint_path) {
  namespace fs = std::filesystem;
  auto file_digest = [](const std::string& path) {
    return coding::xxh64_file(path);  // read in pieces: no copy of a multi-GB model file
  };
  std::error_code ec;
  if (!fs::is_directory(checkpoint_path, ec)) return file_digest(checkpoint_path);
  // A Hugging Face directory: config.json and every *.safetensors, in name order.
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(checkpoint_path)) {
    const std::string name = e.path().filename().string();
    if (name == "config.json" || e.path().extension() == ".safetensors")
      files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  VQ_CHECK(!files.empty(), IoError, "model directory '", checkpoint_path,
           "' holds no config.json or *.safetensors to identify it by");
  std::vector<uint64_t> parts;
  for (const std::string& f : files) parts.push_back(file_digest(f));
  return coding::xxh64(parts.data(), parts.size() * sizeof(uint64_t));
}

int64_t min_calibration_tokens(int64_t head_dim, int64_t chunk_tokens) {
  // Centred rows of n tokens span at most n - 1 directions: D components need D + 1 rows; the
  // per-chunk distortion table is measured on whole chunks.
  return std::max(head_dim + 1, chunk_tokens);
}

}  // namespace vq

#include "transform/family_coders.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cassert>
#include <cmath>

#include "codecs/pca_codec.hpp"
#include "coding/quantizer.hpp"
#include "core/options.hpp"
#include "transform/method_common.hpp"
#include "transform/transform_codec.hpp"
#include "veloxquant/errors.hpp"

namespace vq::transform {

namespace {

constexpr uint8_t kPcaFormat = 1;  // pca_coder.hpp's section format
constexpr uint8_t kGearFormat = 1;

using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void put_fp16(std::vector<uint8_t>& out, float v) {
  coding::put_u16(out, fp32_to_fp16(v));
}

float read_fp16(coding::ByteReader& in, const char* what) {
  const float v = fp16_to_fp32(in.u16(what));
  VQ_CHECK(std::isfinite(v), FormatError, what, ": fp16 value is NaN or Inf");
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// FixedRulePcaCoder

FixedRulePcaCoder::FixedRulePcaCoder(int64_t D, BitRule rule)
    : RowCoder(D), rule_(std::move(rule)), inner_(D, PcaSettings{}) {}

void FixedRulePcaCoder::fit(const float* rows, int64_t n, EncodedSection& sec) {
  const int64_t D = width();
  // Every component at 8 bits: the fit keeps all r directions, then the rule picks the widths.
  PcaSettings all;
  all.rule = AllocRule::Uniform;
  all.bit_budget = 8 * D;
  const PcaModel m = fit_pca_model(rows, n, D, all);
  const int64_t r = static_cast<int64_t>(m.variances.size());
  assert(m.kept() == r);
  variances_ = m.variances;
  bits_ = rule_(m.variances, D);
  VQ_CHECK(static_cast<int64_t>(bits_.size()) == r, InvalidArgument, "allocation rule returned ",
           bits_.size(), " widths for ", r, " components");
  auto& out = sec.bytes;
  const size_t start = out.size();
  int64_t k = 0;
  for (int b : bits_) {
    VQ_CHECK(b >= 0 && b <= coding::kMaxQuantBits, InvalidArgument, "allocation rule width ", b,
             " is outside [0, ", coding::kMaxQuantBits, "]");
    k += b > 0 ? 1 : 0;
  }
  coding::put_u8(out, kPcaFormat);
  coding::put_varint(out, static_cast<uint64_t>(D));
  coding::put_varint(out, static_cast<uint64_t>(k));
  for (int b : bits_)
    if (b > 0) coding::put_u8(out, static_cast<uint8_t>(b));
  const size_t params_end = out.size();
  coding::put_f32(out, m.mean.data(), m.mean.size());
  for (int64_t j = 0; j < r; ++j)
    if (bits_[static_cast<size_t>(j)] > 0)
      coding::put_f32(out, m.basis.data() + j * D, static_cast<size_t>(D));
  sec.breakdown.params += static_cast<int64_t>(params_end - start);
  sec.breakdown.basis += static_cast<int64_t>(out.size() - params_end);
  // The encoder takes its state from the very bytes a decoder will read.
  coding::ByteReader hdr(out.data(), out.size(), start);
  inner_.read_header(hdr);
}

// ---------------------------------------------------------------------------------------------
// Fp16RowCoder

void Fp16RowCoder::encode_chunk(const float* rows, int64_t n, EncodedSection& sec) {
  auto& out = sec.bytes;
  const size_t start = out.size();
  coding::put_varint(out, static_cast<uint64_t>(n));
  sec.breakdown.params += static_cast<int64_t>(out.size() - start);
  const int64_t count = n * width();
  for (int64_t i = 0; i < count; ++i) put_fp16(out, rows[i]);
  sec.breakdown.payload += 2 * count;
  sec.fixed_width_payload += 2 * count;
}

int64_t Fp16RowCoder::decode_chunk(coding::ByteReader& in, int64_t max_rows, float* rows) {
  const int64_t n =
      static_cast<int64_t>(in.varint("fp16 chunk token count", static_cast<uint64_t>(max_rows)));
  VQ_CHECK(n >= 1, FormatError, "fp16 chunk: token count 0");
  const int64_t count = n * width();
  in.need(static_cast<size_t>(2 * count), "fp16 chunk values");
  for (int64_t i = 0; i < count; ++i) rows[i] = read_fp16(in, "fp16 chunk value");
  return n;
}

// ---------------------------------------------------------------------------------------------
// GearRowCoder

GearRowCoder::GearRowCoder(int64_t W, int bits, int64_t rank, double ratio)
    : RowCoder(W), bits_(bits), rank_(rank), ratio_(ratio) {}

void GearRowCoder::fit(const float*, int64_t, EncodedSection& sec) {
  coding::put_u8(sec.bytes, kGearFormat);
  coding::put_u8(sec.bytes, static_cast<uint8_t>(bits_));
  sec.breakdown.params += 2;
}

void GearRowCoder::read_header(coding::ByteReader& in) {
  const uint8_t format = in.u8("gear section format");
  VQ_CHECK(format == kGearFormat, FormatError, "gear section: unknown format ", int(format),
           " (this build reads format ", int(kGearFormat), ")");
  const uint8_t b = in.u8("gear section bit width");
  VQ_CHECK(b >= 1 && b <= coding::kMaxQuantBits, FormatError, "gear section: bit width ", int(b),
           " is outside [1, ", coding::kMaxQuantBits, "]");
  bits_ = b;
}

void GearRowCoder::encode_chunk(const float* rows, int64_t n, EncodedSection& sec) {
  const int64_t W = width(), count = n * W;
  auto& out = sec.bytes;
  size_t mark = out.size();
  coding::put_varint(out, static_cast<uint64_t>(n));
  // 1. Outliers: the m largest |x| (ties to the lower index), stored by ascending index.
  const int64_t m = std::min<int64_t>(
      count, static_cast<int64_t>(std::floor(ratio_ * static_cast<double>(count) + 0.5)));
  std::vector<int64_t> idx(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) idx[static_cast<size_t>(i)] = i;
  auto larger = [&](int64_t a, int64_t b) {
    const float fa = std::fabs(rows[a]), fb = std::fabs(rows[b]);
    return fa != fb ? fa > fb : a < b;
  };
  if (m > 0 && m < count) std::nth_element(idx.begin(), idx.begin() + m, idx.end(), larger);
  idx.resize(static_cast<size_t>(m));
  std::sort(idx.begin(), idx.end());
  coding::put_varint(out, static_cast<uint64_t>(m));
  std::vector<float> dense(rows, rows + count);
  int64_t prev = 0;
  for (int64_t i : idx) {
    coding::put_varint(out, static_cast<uint64_t>(i - prev));
    prev = i;
    dense[static_cast<size_t>(i)] = 0.0f;
  }
  sec.breakdown.params += static_cast<int64_t>(out.size() - mark);
  for (int64_t i : idx) put_fp16(out, rows[i]);
  sec.breakdown.payload += 2 * m;
  sec.fixed_width_payload += 2 * m;
  // 2. Per-token affine quantization of the dense part.
  mark = out.size();
  std::vector<uint8_t> codes(static_cast<size_t>(count));
  std::vector<float> deq(static_cast<size_t>(count));
  for (int64_t t = 0; t < n; ++t) {
    const float* x = dense.data() + t * W;
    const coding::AffineParams p = coding::fit_affine(x, W, bits_);
    coding::quantize_affine(x, W, p, bits_, codes.data() + t * W);
    coding::dequantize_affine(codes.data() + t * W, W, p, deq.data() + t * W);
    coding::put_f32(out, &p.min, 1);
    coding::put_f32(out, &p.scale, 1);
  }
  sec.breakdown.params += static_cast<int64_t>(out.size() - mark);
  const coding::StreamSizes sz = enc_.encode(codes.data(), static_cast<size_t>(count), bits_, out);
  sec.breakdown.table += sz.overhead;
  sec.breakdown.payload += sz.payload;
  sec.fixed_width_payload += sz.fixed_width_payload;
  // 3. Rank-k factorization of the quantization residual.
  const int64_t k = std::min({rank_, n, W});
  mark = out.size();
  coding::put_varint(out, static_cast<uint64_t>(k));
  sec.breakdown.params += static_cast<int64_t>(out.size() - mark);
  if (k > 0) {
    Eigen::Map<const RowMatF> Dm(dense.data(), n, W), Qm(deq.data(), n, W);
    const Eigen::MatrixXd R = (Dm - Qm).cast<double>();
    Eigen::JacobiSVD<Eigen::MatrixXd> svd(R, Eigen::ComputeThinU | Eigen::ComputeThinV);
    const Eigen::MatrixXd A = svd.matrixU().leftCols(k) * svd.singularValues().head(k).asDiagonal();
    const Eigen::MatrixXd B = svd.matrixV().leftCols(k).transpose();
    mark = out.size();
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < k; ++j) put_fp16(out, static_cast<float>(A(t, j)));
    for (int64_t j = 0; j < k; ++j)
      for (int64_t c = 0; c < W; ++c) put_fp16(out, static_cast<float>(B(j, c)));
    sec.breakdown.basis += static_cast<int64_t>(out.size() - mark);
  }
}

int64_t GearRowCoder::decode_chunk(coding::ByteReader& in, int64_t max_rows, float* rows) {
  const int64_t W = width();
  const int64_t n =
      static_cast<int64_t>(in.varint("gear chunk token count", static_cast<uint64_t>(max_rows)));
  VQ_CHECK(n >= 1, FormatError, "gear chunk: token count 0");
  const int64_t count = n * W;
  const int64_t m =
      static_cast<int64_t>(in.varint("gear outlier count", static_cast<uint64_t>(count)));
  std::vector<int64_t> idx(static_cast<size_t>(m));
  int64_t pos = 0;
  for (int64_t i = 0; i < m; ++i) {
    const uint64_t delta = in.varint("gear outlier index delta", static_cast<uint64_t>(count));
    pos += static_cast<int64_t>(delta);
    VQ_CHECK(pos < count && (i == 0 || delta > 0), FormatError, "gear outlier ", i, ": index ", pos,
             " is repeated or outside [0, ", count, ")");
    idx[static_cast<size_t>(i)] = pos;
  }
  std::vector<float> vals(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i)
    vals[static_cast<size_t>(i)] = read_fp16(in, "gear outlier value");
  std::vector<coding::AffineParams> params(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    float mp[2];
    in.f32(mp, 2, "gear quantizer params");
    VQ_CHECK(mp[1] > 0.0f, FormatError, "gear token ", t, ": scale ", mp[1], " must be > 0");
    params[static_cast<size_t>(t)] = coding::AffineParams{mp[0], mp[1]};
  }
  std::vector<uint8_t> codes(static_cast<size_t>(count));
  dec_.decode(in, codes.data(), static_cast<size_t>(count), bits_);
  for (int64_t t = 0; t < n; ++t)
    coding::dequantize_affine(codes.data() + t * W, W, params[static_cast<size_t>(t)],
                              rows + t * W);
  const int64_t k =
      static_cast<int64_t>(in.varint("gear rank", static_cast<uint64_t>(std::min(n, W))));
  if (k > 0) {
    in.need(static_cast<size_t>(2 * k * (n + W)), "gear low-rank factors");
    RowMatF A(n, k), B(k, W);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < k; ++j) A(t, j) = read_fp16(in, "gear factor A");
    for (int64_t j = 0; j < k; ++j)
      for (int64_t c = 0; c < W; ++c) B(j, c) = read_fp16(in, "gear factor B");
    Eigen::Map<RowMatF> out(rows, n, W);
    out.noalias() += A * B;
  }
  for (int64_t i = 0; i < m; ++i) rows[idx[static_cast<size_t>(i)]] = vals[static_cast<size_t>(i)];
  for (int64_t i = 0; i < count; ++i)
    VQ_CHECK(std::isfinite(rows[i]), FormatError, "gear chunk: decoded value ", i,
             " is not finite");
  return n;
}

// ---------------------------------------------------------------------------------------------
// KiviRowCoder

KiviRowCoder::KiviRowCoder(int64_t W, bool keys, int bits, int64_t group)
    : RowCoder(W), keys_(keys), bits_(bits), group_(group) {}

void KiviRowCoder::encode_chunk(const float* rows, int64_t n, EncodedSection& sec) {
  const int64_t W = width(), count = n * W;
  auto& out = sec.bytes;
  const size_t start = out.size();
  coding::put_varint(out, static_cast<uint64_t>(n));
  codes_.resize(static_cast<size_t>(count));
  std::vector<float> buf(static_cast<size_t>(std::max(n, W)));
  std::vector<uint8_t> cbuf(buf.size());
  if (keys_) {
    for (int64_t c = 0; c < W; ++c) {  // per channel, over the chunk's tokens
      for (int64_t t = 0; t < n; ++t) buf[static_cast<size_t>(t)] = rows[t * W + c];
      const coding::AffineParams p = coding::fit_affine(buf.data(), n, bits_);
      coding::quantize_affine(buf.data(), n, p, bits_, cbuf.data());
      for (int64_t t = 0; t < n; ++t)
        codes_[static_cast<size_t>(t * W + c)] = cbuf[static_cast<size_t>(t)];
      coding::put_f32(out, &p.min, 1);
      coding::put_f32(out, &p.scale, 1);
    }
  } else {
    for (int64_t t = 0; t < n; ++t)  // per token, in groups of `group_` channels
      for (int64_t c0 = 0; c0 < W; c0 += group_) {
        const int64_t g = std::min(group_, W - c0);
        const coding::AffineParams p = coding::fit_affine(rows + t * W + c0, g, bits_);
        coding::quantize_affine(rows + t * W + c0, g, p, bits_, codes_.data() + t * W + c0);
        coding::put_f32(out, &p.min, 1);
        coding::put_f32(out, &p.scale, 1);
      }
  }
  sec.breakdown.params += static_cast<int64_t>(out.size() - start);
  const coding::StreamSizes sz = enc_.encode(codes_.data(), static_cast<size_t>(count), bits_, out);
  sec.breakdown.table += sz.overhead;
  sec.breakdown.payload += sz.payload;
  sec.fixed_width_payload += sz.fixed_width_payload;
}

int64_t KiviRowCoder::decode_chunk(coding::ByteReader& in, int64_t max_rows, float* rows) {
  const int64_t W = width();
  const int64_t n =
      static_cast<int64_t>(in.varint("kivi chunk token count", static_cast<uint64_t>(max_rows)));
  VQ_CHECK(n >= 1, FormatError, "kivi chunk: token count 0");
  const int64_t per_token = (W + group_ - 1) / group_;
  const int64_t n_params = keys_ ? W : n * per_token;
  std::vector<coding::AffineParams> params(static_cast<size_t>(n_params));
  for (int64_t i = 0; i < n_params; ++i) {
    float mp[2];
    in.f32(mp, 2, "kivi quantizer params");
    VQ_CHECK(mp[1] > 0.0f, FormatError, "kivi group ", i, ": scale ", mp[1], " must be > 0");
    params[static_cast<size_t>(i)] = coding::AffineParams{mp[0], mp[1]};
  }
  codes_.resize(static_cast<size_t>(n * W));
  dec_.decode(in, codes_.data(), static_cast<size_t>(n * W), bits_);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < W; ++c) {
      const coding::AffineParams& p =
          params[static_cast<size_t>(keys_ ? c : t * per_token + c / group_)];
      rows[t * W + c] =
          p.min + static_cast<float>(codes_[static_cast<size_t>(t * W + c)]) * p.scale;
    }
  for (int64_t i = 0; i < n * W; ++i)
    VQ_CHECK(std::isfinite(rows[i]), FormatError, "kivi chunk: decoded value ", i,
             " is not finite");
  return n;
}

// ---------------------------------------------------------------------------------------------
// Allocation rules

std::vector<int> svdq_schedule_bits(int64_t r, int64_t D, const std::vector<int>& schedule) {
  VQ_CHECK(!schedule.empty() && r <= D, InvalidArgument, "svdq schedule: ", schedule.size(),
           " groups for r = ", r, ", D = ", D, " (needs >= 1 group and r <= D)");
  const int64_t G = static_cast<int64_t>(schedule.size());
  std::vector<int> bits(static_cast<size_t>(r));
  for (int64_t j = 0; j < r; ++j)
    bits[static_cast<size_t>(j)] = schedule[static_cast<size_t>(j * G / D)];
  return bits;
}

std::vector<int> palu_bits(int64_t r, int64_t rank, int hi, int lo) {
  const int64_t kept = rank == 0 ? r : std::min(rank, r);
  const int64_t n_hi = kept == 0 ? 0 : std::max<int64_t>(1, kept / 4);
  std::vector<int> bits(static_cast<size_t>(r), 0);
  for (int64_t j = 0; j < kept; ++j) bits[static_cast<size_t>(j)] = j < n_hi ? hi : lo;
  return bits;
}

double participation_ratio(const std::vector<double>& v) {
  double s = 0, s2 = 0;
  for (double x : v) {
    const double y = std::max(x, 0.0);
    s += y;
    s2 += y * y;
  }
  return s2 > 0 ? s * s / s2 : 0.0;
}

int64_t spectral_split(const std::vector<double>& v) {
  const int64_t r = static_cast<int64_t>(v.size());
  if (r == 0) return 0;
  const int64_t k = static_cast<int64_t>(std::llround(participation_ratio(v)));
  return std::clamp<int64_t>(k, 1, r);
}

std::vector<int> spectral_bits(const std::vector<double>& v, int signal_bits, int noise_bits) {
  const int64_t k = spectral_split(v);
  std::vector<int> bits(v.size(), noise_bits);
  for (int64_t j = 0; j < k; ++j) bits[static_cast<size_t>(j)] = signal_bits;
  return bits;
}

// ---------------------------------------------------------------------------------------------
// Registry helpers

std::vector<OptionSpec> chunk_options() {
  std::vector<OptionSpec> out;
  for (auto& o : pca_common_options())
    if (o.name == "chunk_tokens" || o.name == "fit_tokens") out.push_back(o);
  return out;
}

OptionSpec kind_option() {
  return opt_choice("kind", "k", {"k", "v"},
                    "block codec only: whether its blocks hold keys (k) or values (v); a cache "
                    "codes each stream by its own kind");
}

void set_family_factories(MethodInfo& m, KvFactoryMaker maker) {
  m.family = Family::Transform;
  m.make_row_codec = codecs::family_row_codec_factory(maker);
  const bool has_kind = find_option(m, "kind") != nullptr;
  m.make_codec = [maker, has_kind](const CacheConfig& c,
                                   int64_t head_dim) -> std::unique_ptr<BlockCodec> {
    VQ_CHECK(head_dim >= 1 && head_dim <= 65536, InvalidArgument, c.method(),
             " codec: head_dim = ", head_dim, " is out of range; allowed [1, 65536]");
    KvCoderFactory f = maker(c, head_dim);
    const int kv = has_kind && c.get_string("kind") == "v" ? 1 : 0;
    return std::make_unique<TransformBlockCodec>(c, head_dim, false, c.get_int("chunk_tokens"),
                                                 [f, kv](int64_t w) { return f(w, kv); });
  };
}

}  // namespace vq::transform

#include "codecs/pca_codec.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "codecs/bit_pack.hpp"
#include "codecs/gear_codec.hpp"
#include "coding/bit_allocation.hpp"
#include "coding/byte_io.hpp"
#include "coding/huffman.hpp"
#include "coding/latent_kernels.hpp"
#include "coding/quantizer.hpp"
#include "transform/method_common.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/errors.hpp"

namespace vq::codecs {

namespace {

using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

using coding::madd;

}  // namespace

PcaCodec::PcaCodec(int64_t dim, std::unique_ptr<transform::RowCoder> fitter,
                   transform::PcaSettings reader, transform::StreamId id, PcaGeometry g)
    : RowCodec(dim), fitter_(std::move(fitter)), reader_(std::move(reader)), id_(id), g_(g) {
  VQ_CHECK(dim >= 1 && dim <= 65536, InvalidArgument, "PCA codec: head_dim = ", dim,
           " is out of range; allowed [1, 65536]");
  VQ_CHECK(g_.chunk >= 1 && g_.fit >= 1, InvalidArgument, "PCA codec: chunk_tokens = ", g_.chunk,
           " and fit_tokens = ", g_.fit, " must both be >= 1");
  given_model_ = !fitter_->fit_uses_rows();
  if (given_model_) fit(nullptr, 0);
}

void PcaCodec::fit(const float* rows, int64_t n) {
  VQ_CHECK(!fitted_, InvalidArgument, "PCA codec: fit() called twice");
  VQ_CHECK(given_model_ || (rows != nullptr && n >= 1), InvalidArgument,
           "PCA codec: fit needs at least one row; got n = ", n);
  EncodedSection sec;
  fitter_->fit(rows, n, sec);
  take_model(sec.bytes);
  fitter_.reset();
}

void PcaCodec::take_model(const std::vector<uint8_t>& header) {
  const int64_t D = dim();
  // Read the model back from the header bytes, as the existing cache's decoder does.
  transform::PcaRowCoder reader(D, reader_, id_);
  coding::ByteReader in(header.data(), header.size());
  reader.read_header(in);
  VQ_CHECK(in.at_end(), FormatError, "PCA codec: ", in.remaining(),
           " bytes left after the section header");
  header_bytes_ = static_cast<int64_t>(header.size());
  const transform::PcaModel& m = reader.model();
  const int64_t k = m.kept();
  widths_.resize(static_cast<size_t>(k));
  int64_t bits = 0;
  for (int64_t j = 0; j < k; ++j) {
    widths_[static_cast<size_t>(j)] = static_cast<uint8_t>(m.kept_bits[static_cast<size_t>(j)]);
    bits += m.kept_bits[static_cast<size_t>(j)];
  }
  row_bytes_ = packed_bytes(bits);
  bit_off_.resize(static_cast<size_t>(k));
  for (int64_t j = 0, at = 0; j < k; ++j) {
    bit_off_[static_cast<size_t>(j)] = static_cast<uint32_t>(at);
    at += widths_[static_cast<size_t>(j)];
  }
  external_entry_ = reader.external_entry();
  external_bytes_ = reader.external_bytes();
  basis_rows_.resize(static_cast<size_t>(k));
  if (external_entry_ >= 0) {
    // A calibrated model: point into the shared calibration instead of holding a copy.
    calibration_ = reader_.calibration;
    const CalibrationEntry& e = calibration_->entries[static_cast<size_t>(external_entry_)];
    mean_ = e.mean.data();
    fixed_ranges_ = reader_.quant_calibrated;
    int64_t slot = 0;
    for (int64_t j = 0; j < D; ++j) {
      const int b = m.bits[static_cast<size_t>(j)];
      if (b == 0) continue;
      basis_rows_[static_cast<size_t>(slot++)] = e.basis.data() + j * D;
      if (fixed_ranges_) {  // PcaRowCoder::calibrated_model's fixed quantizer
        const size_t t = static_cast<size_t>(j * kCalibWidths + b);
        const float lo = e.range_lo[t], hi = e.range_hi[t];
        fixed_.push_back(coding::AffineParams{
            lo,
            std::max((hi - lo) / static_cast<float>(coding::quant_levels(b)), coding::kMinScale)});
      }
    }
  } else {
    own_mean_ = m.mean;
    own_basis_ = m.basis;
    mean_ = own_mean_.data();
    for (int64_t j = 0; j < k; ++j) basis_rows_[static_cast<size_t>(j)] = own_basis_.data() + j * D;
  }
  static std::atomic<uint64_t> next_model{1};
  model_id_ = next_model.fetch_add(1, std::memory_order_relaxed);
  fitted_ = true;
}

int64_t PcaCodec::state_bytes() const {
  return static_cast<int64_t>(4 * (own_mean_.capacity() + own_basis_.capacity()) +
                              widths_.capacity() + 4 * bit_off_.capacity() +
                              sizeof(const float*) * basis_rows_.capacity() +
                              sizeof(coding::AffineParams) * fixed_.capacity());
}

void PcaCodec::encode(const float* rows, int64_t n, uint8_t* params, uint8_t* codes) {
  VQ_CHECK(fitted_, InvalidArgument, "PCA codec: encode before fit");
  VQ_CHECK(n >= 1 && n <= g_.chunk, InvalidArgument, "PCA codec: a chunk of ", n,
           " rows; allowed [1, chunk_tokens = ", g_.chunk, "]");
  const int64_t D = dim(), k = kept(), rb = row_bytes_;
  if (k == 0) return;  // nothing to store: every row is the mean
  // The same arithmetic as PcaRowCoder::encode_chunk: center, one GEMM, per-component affine.
  RowMatF B(k, D);
  for (int64_t j = 0; j < k; ++j)
    std::memcpy(B.data() + j * D, basis_rows_[static_cast<size_t>(j)], sizeof(float) * D);
  Eigen::Map<const RowMatF> X(rows, n, D);
  const Eigen::Map<const Eigen::RowVectorXf> mean(mean_, D);
  const RowMatF Xc = X.rowwise() - mean;
  RowMatF L(k, n);
  L.noalias() = B * Xc.transpose();
  std::vector<uint8_t> q(static_cast<size_t>(k * n)), qt(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    const int b = widths_[static_cast<size_t>(j)];
    const float* lj = L.data() + j * n;
    const coding::AffineParams p =
        fixed_ranges_ ? fixed_[static_cast<size_t>(j)] : coding::fit_affine(lj, n, b);
    coding::quantize_affine(lj, n, p, b, q.data() + j * n);
    if (!fixed_ranges_) {
      std::memcpy(params + 8 * j, &p.min, 4);
      std::memcpy(params + 8 * j + 4, &p.scale, 4);
    }
  }
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) qt[static_cast<size_t>(j)] = q[static_cast<size_t>(j * n + t)];
    pack_var(qt.data(), widths_.data(), k, codes + t * rb);
  }
}

void PcaCodec::chunk_ranges(const uint8_t* params, float* mins, float* scales) const {
  for (int64_t j = 0; j < kept(); ++j) {
    coding::AffineParams p;
    if (fixed_ranges_) {
      p = fixed_[static_cast<size_t>(j)];
    } else {
      std::memcpy(&p.min, params + 8 * j, 4);
      std::memcpy(&p.scale, params + 8 * j + 4, 4);
    }
    mins[j] = p.min;
    scales[j] = p.scale;
  }
}

namespace {

// A row's k codes as floats: the row is copied into a buffer with 8 zero bytes after it, then
// code j is one unaligned 64-bit load at its byte offset, a shift and a mask (widths <= 8 bits,
// so a code never spans more than two bytes). The same values unpack_var gives, without its
// serial bit loop.
inline void row_codes_f32(const uint8_t* row, int64_t rb, const uint32_t* bit_off,
                          const uint8_t* widths, int64_t k, uint8_t* pad, float* out) {
  std::memcpy(pad, row, static_cast<size_t>(rb));
  for (int64_t j = 0; j < k; ++j) {
    uint64_t w;
    std::memcpy(&w, pad + (bit_off[j] >> 3), 8);
    out[j] = static_cast<float>((w >> (bit_off[j] & 7u)) & ((uint64_t{1} << widths[j]) - 1u));
  }
}

#if defined(__AVX2__) && defined(__FMA__)
// Where code j sits in a row: byte j_off, shift j_sh, mask j_mask (widths <= 8 and shifts <= 7,
// so one 32-bit load at the byte holds the code). Padded to a multiple of 8 components with
// empty lanes (offset 0, mask 0: code 0).
struct CodeLanes {
  std::vector<int32_t> off, sh, mask;
  void build(const uint32_t* bit_off, const uint8_t* widths, int64_t k) {
    const size_t kp = static_cast<size_t>((k + 7) / 8 * 8);
    off.assign(kp, 0);
    sh.assign(kp, 0);
    mask.assign(kp, 0);
    for (int64_t j = 0; j < k; ++j) {
      off[static_cast<size_t>(j)] = static_cast<int32_t>(bit_off[j] >> 3);
      sh[static_cast<size_t>(j)] = static_cast<int32_t>(bit_off[j] & 7u);
      mask[static_cast<size_t>(j)] = (1 << widths[j]) - 1;
    }
  }
};
#endif

// The latest query a thread projected, per model: attention asks for the same query once per
// run of rows (a chunk), so the k x D projection is paid once per query, not once per chunk.
struct QueryMemo {
  uint64_t model = 0;
  std::vector<float> q;     // [D] the query
  std::vector<float> proj;  // [k] basis_j . q
  float mean_dot = 0.0f;    // mean . q
};

}  // namespace

void PcaCodec::dot_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* q,
                        float* out) const {
  if (n <= 0) return;
  const int64_t D = dim(), k = kept(), rb = row_bytes_;
  thread_local QueryMemo memo;
  const size_t Dz = static_cast<size_t>(D);
  if (memo.model != model_id_ || memo.q.size() != Dz ||
      std::memcmp(memo.q.data(), q, sizeof(float) * Dz) != 0) {
    memo.model = model_id_;
    memo.q.assign(q, q + D);
    memo.proj.resize(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      const float* bj = basis_rows_[static_cast<size_t>(j)];
      float s = 0.0f;
      for (int64_t d = 0; d < D; ++d) s = madd(bj[d], q[d], s);
      memo.proj[static_cast<size_t>(j)] = s;
    }
    float m = 0.0f;
    for (int64_t d = 0; d < D; ++d) m = madd(mean_[d], q[d], m);
    memo.mean_dot = m;
  }
  // Per chunk: c0 = mean . q + sum_j min_j q'_j, w_j = scale_j q'_j.
  thread_local std::vector<float> wj, mins, scales, code;
  thread_local std::vector<uint8_t> pad;
  wj.resize(static_cast<size_t>(k));
  mins.resize(static_cast<size_t>(k));
  scales.resize(static_cast<size_t>(k));
  code.resize(static_cast<size_t>(k));
  pad.assign(static_cast<size_t>(rb + 8), 0);
  chunk_ranges(params, mins.data(), scales.data());
  float c0 = memo.mean_dot;
  for (int64_t j = 0; j < k; ++j) {
    const float pj = memo.proj[static_cast<size_t>(j)];
    c0 = madd(mins[static_cast<size_t>(j)], pj, c0);
    wj[static_cast<size_t>(j)] = scales[static_cast<size_t>(j)] * pj;
  }
  int64_t t = 0;
#if defined(__AVX2__) && defined(__FMA__)
  // Eight rows at a time, one lane per row: code j of the eight rows in one gather, then the same
  // fused multiply-add chain as the scalar loop below (c0, then j = 0, 1, ... in order), so a
  // row's value does not depend on which path computed it. The gathers read up to 3 bytes past a
  // code; the group that ends the buffer goes through a padded copy.
  if (k > 0) {
    thread_local std::vector<uint8_t> tail;
    const int64_t last_off = static_cast<int64_t>(bit_off_[static_cast<size_t>(k - 1)] >> 3);
    const __m256i rows = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                            _mm256_set1_epi32(static_cast<int32_t>(rb)));
    for (; t + 8 <= n; t += 8) {
      const uint8_t* src = codes + t * rb;
      if ((t + 7) * rb + last_off + 4 > n * rb) {
        tail.assign(static_cast<size_t>(8 * rb + 4), 0);
        std::memcpy(tail.data(), src, static_cast<size_t>(8 * rb));
        src = tail.data();
      }
      __m256 acc = _mm256_set1_ps(c0);
      for (int64_t j = 0; j < k; ++j) {
        const uint32_t bo = bit_off_[static_cast<size_t>(j)];
        __m256i v = _mm256_i32gather_epi32(reinterpret_cast<const int*>(src + (bo >> 3)), rows, 1);
        v = _mm256_srl_epi32(v, _mm_cvtsi32_si128(static_cast<int>(bo & 7u)));
        v = _mm256_and_si256(v, _mm256_set1_epi32((1 << widths_[static_cast<size_t>(j)]) - 1));
        acc =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(wj[static_cast<size_t>(j)]), acc);
      }
      _mm256_storeu_ps(out + t, acc);
    }
  }
#endif
  for (; t < n; ++t) {
    row_codes_f32(codes + t * rb, rb, bit_off_.data(), widths_.data(), k, pad.data(), code.data());
    float s = c0;
    for (int64_t j = 0; j < k; ++j)
      s = madd(code[static_cast<size_t>(j)], wj[static_cast<size_t>(j)], s);
    out[t] = s;
  }
}

void PcaCodec::axpy_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                         float* acc) const {
  if (n <= 0) return;
  const int64_t D = dim(), k = kept(), rb = row_bytes_;
  thread_local std::vector<float> lat, mins, scales, code;
  thread_local std::vector<uint8_t> pad;
  lat.assign(static_cast<size_t>(k), 0.0f);
  mins.resize(static_cast<size_t>(k));
  scales.resize(static_cast<size_t>(k));
  code.resize(static_cast<size_t>(k));
  pad.assign(static_cast<size_t>(rb + 8), 0);
  float wsum = 0.0f;
#if defined(__AVX2__) && defined(__FMA__)
  // Eight components at a time, one lane per component: the codes of a row in one gather, and
  // lat_j += w_t code_tj with the scalar loop's fused multiply-add, rows in order.
  if (k > 0) {
    thread_local CodeLanes lanes;
    thread_local std::vector<float> lat8;
    lanes.build(bit_off_.data(), widths_.data(), k);
    const int64_t kp = static_cast<int64_t>(lanes.off.size());
    lat8.assign(static_cast<size_t>(kp), 0.0f);
    for (int64_t t = 0; t < n; ++t) {
      const uint8_t* row = codes + t * rb;
      if (t + 1 == n) {  // the gathers read up to 3 bytes past the row
        std::memcpy(pad.data(), row, static_cast<size_t>(rb));
        row = pad.data();
      }
      const float wt = w[t];
      wsum += wt;
      const __m256 wv = _mm256_set1_ps(wt);
      for (int64_t jb = 0; jb < kp; jb += 8) {
        const __m256i off =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes.off.data() + jb));
        __m256i v = _mm256_i32gather_epi32(reinterpret_cast<const int*>(row), off, 1);
        v = _mm256_srlv_epi32(
            v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes.sh.data() + jb)));
        v = _mm256_and_si256(
            v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes.mask.data() + jb)));
        float* l = lat8.data() + jb;
        _mm256_storeu_ps(l, _mm256_fmadd_ps(wv, _mm256_cvtepi32_ps(v), _mm256_loadu_ps(l)));
      }
    }
    std::copy_n(lat8.begin(), k, lat.begin());
  } else {
    for (int64_t t = 0; t < n; ++t) wsum += w[t];
  }
#else
  for (int64_t t = 0; t < n; ++t) {
    row_codes_f32(codes + t * rb, rb, bit_off_.data(), widths_.data(), k, pad.data(), code.data());
    const float wt = w[t];
    wsum += wt;
    for (int64_t j = 0; j < k; ++j)
      lat[static_cast<size_t>(j)] =
          madd(wt, code[static_cast<size_t>(j)], lat[static_cast<size_t>(j)]);
  }
#endif
  chunk_ranges(params, mins.data(), scales.data());
  for (int64_t d = 0; d < D; ++d) acc[d] = madd(wsum, mean_[d], acc[d]);
  for (int64_t j = 0; j < k; ++j) {
    const float a = madd(scales[static_cast<size_t>(j)], lat[static_cast<size_t>(j)],
                         mins[static_cast<size_t>(j)] * wsum);
    const float* bj = basis_rows_[static_cast<size_t>(j)];
    for (int64_t d = 0; d < D; ++d) acc[d] = madd(a, bj[d], acc[d]);
  }
}

void PcaCodec::decode(const uint8_t* params, const uint8_t* codes, int64_t n, float* out) const {
  if (n <= 0) return;
  const int64_t D = dim(), k = kept(), rb = row_bytes_;
  const size_t kz = static_cast<size_t>(k), nz = static_cast<size_t>(n);
  // Per-component dequantizer of this chunk.
  std::vector<float> mins(kz), scales(kz);
  chunk_ranges(params, mins.data(), scales.data());
  // The codes component-major, then the storage decoder's steps: coding::dequantize_affine per
  // component and coding::unproject_rows over the chunk (so both forms give the same floats).
  std::vector<uint8_t> q(kz * nz), qt(kz);
  for (int64_t t = 0; t < n; ++t) {
    unpack_var(codes + t * rb, widths_.data(), k, qt.data());
    for (size_t j = 0; j < kz; ++j) q[j * nz + static_cast<size_t>(t)] = qt[j];
  }
  std::vector<float> lat(kz * nz);
  for (size_t j = 0; j < kz; ++j)
    coding::dequantize_affine(q.data() + j * nz, n, coding::AffineParams{mins[j], scales[j]},
                              lat.data() + j * nz);
  const float* basis = own_basis_.data();
  std::vector<float> gathered;  // a calibrated model's kept rows are not contiguous
  if (external_entry_ >= 0) {
    gathered.resize(kz * static_cast<size_t>(D));
    for (size_t j = 0; j < kz; ++j)
      std::memcpy(gathered.data() + j * static_cast<size_t>(D), basis_rows_[j],
                  sizeof(float) * static_cast<size_t>(D));
    basis = gathered.data();
  }
  coding::unproject_rows(lat.data(), k, n, basis, mean_, D, out);
}

int64_t PcaCodec::stored_chunk_bytes(const uint8_t* params, const uint8_t* codes, int64_t n) const {
  (void)params;
  const int64_t k = kept(), rb = row_bytes_;
  std::vector<uint8_t> out;
  coding::put_varint(out, static_cast<uint64_t>(n));
  int64_t total = static_cast<int64_t>(out.size()) + (fixed_ranges_ ? 0 : 8 * k);
  if (k == 0) return total;
  // Codes component-major (each component's n codes in token order), as the storage coder
  // streams them: one stream per width, ascending, components of a width in index order.
  std::vector<uint8_t> q(static_cast<size_t>(k * n)), qt(static_cast<size_t>(k));
  for (int64_t t = 0; t < n; ++t) {
    unpack_var(codes + t * rb, widths_.data(), k, qt.data());
    for (int64_t j = 0; j < k; ++j) q[static_cast<size_t>(j * n + t)] = qt[static_cast<size_t>(j)];
  }
  coding::HuffmanEncoder enc;
  std::vector<uint8_t> group, stream;
  for (int w = 1; w <= coding::kMaxQuantBits; ++w) {
    group.clear();
    for (int64_t j = 0; j < k; ++j)
      if (widths_[static_cast<size_t>(j)] == w)
        group.insert(group.end(), q.begin() + j * n, q.begin() + (j + 1) * n);
    if (group.empty()) continue;
    stream.clear();
    enc.encode(group.data(), group.size(), w, stream, reader_.entropy, static_cast<size_t>(n));
    total += static_cast<int64_t>(stream.size());
  }
  return total;
}

// ---------------------------------------------------------------------------------------------
// Factories

namespace {

PcaGeometry pca_geometry(const CacheConfig& c, int64_t D) {
  const transform::TransformSettings t = transform::pca_transform_settings(c, D);
  PcaGeometry g;
  g.chunk = t.chunk_tokens;
  g.fit = t.fit_tokens;
  return g;
}

transform::StreamId stream_id(const store::StreamInfo& s) {
  return transform::StreamId{s.layer, s.head, s.kv, s.n_heads};
}

void check_dim(const CacheConfig& c, int64_t D) {
  VQ_CHECK(D >= 1 && D <= 65536, InvalidArgument, c.method(), ": head_dim = ", D,
           " is out of range; allowed [1, 65536]");
}

}  // namespace

std::unique_ptr<store::RowCodec> make_kvtc_row_codec(const CacheConfig& c,
                                                     const store::StreamInfo& s) {
  const int64_t D = s.head_dim;
  check_dim(c, D);
  // kvtc.cpp's settings: its alloc / quant options on top of the common PCA ones.
  transform::PcaSettings st = transform::pca_settings(c, D, transform::AllocRule::Dp, true);
  const std::string& a = c.get_string("alloc");
  st.rule = a == "waterfill" ? transform::AllocRule::Waterfill : transform::AllocRule::Dp;
  st.measured_alloc = a == "dp_measured";
  st.quant_calibrated = c.get_string("quant") == "calibrated";
  PcaGeometry g = pca_geometry(c, D);
  g.sink = c.get_int("sink_tokens");
  g.recent = c.get_int("recent_tokens");
  g.pre_rope = c.get_string("rope") == "pre";
  const std::string& path = c.get_string("basis");
  if (path != "local") {  // the checks kvtc's cache makes before it uses a calibration
    std::shared_ptr<const Calibration> cal = load_calibration_shared(path);
    VQ_CHECK(cal->head_dim == D, InvalidArgument, "kvtc: calibration '", path, "' has head_dim ",
             cal->head_dim, " but the cache's head_dim is ", D);
    VQ_CHECK(s.layer >= 0 && s.layer < cal->n_layers, InvalidArgument, "kvtc: layer ", s.layer,
             " is outside the calibration '", path, "' (n_layers = ", cal->n_layers, ")");
    // n_heads = 0: a probe that does not know the head count yet (e.g. asking wants_pre_rope()).
    VQ_CHECK(s.n_heads == 0 || s.n_heads == cal->n_kv_heads, InvalidArgument,
             "kvtc: the cache has ", s.n_heads, " KV heads but the calibration '", path,
             "' has n_kv_heads = ", cal->n_kv_heads);
    const RopeMode want = g.pre_rope ? RopeMode::Pre : RopeMode::Post;
    VQ_CHECK(cal->rope == want, InvalidArgument, "kvtc: calibration '", path, "' was measured on ",
             rope_mode_name(cal->rope), "-RoPE keys but the cache has rope=", rope_mode_name(want));
    VQ_CHECK(!(st.measured_alloc && !st.quant_calibrated) || g.chunk == cal->chunk_tokens,
             InvalidArgument,
             "kvtc: alloc=dp_measured with quant=chunk uses the per-chunk error "
             "the calibration '",
             path, "' measured with chunk_tokens = ", cal->chunk_tokens,
             ", but this cache has chunk_tokens = ", g.chunk,
             "; match them (calibrate --chunk-tokens) or use quant=calibrated");
    st.calibration = cal;
    st.calibration_id = cal->id();
  }
  const transform::StreamId id = stream_id(s);
  return std::make_unique<PcaCodec>(D, std::make_unique<transform::PcaRowCoder>(D, st, id), st, id,
                                    g);
}

std::unique_ptr<store::RowCodec> make_pca_row_codec(const CacheConfig& c,
                                                    const store::StreamInfo& s,
                                                    transform::AllocRule rule,
                                                    bool from_alloc_option) {
  const int64_t D = s.head_dim;
  check_dim(c, D);
  const transform::PcaSettings st = transform::pca_settings(c, D, rule, from_alloc_option);
  const transform::StreamId id = stream_id(s);
  return std::make_unique<PcaCodec>(D, std::make_unique<transform::PcaRowCoder>(D, st, id), st, id,
                                    pca_geometry(c, D));
}

store::RowCodecFactory family_row_codec_factory(transform::KvFactoryMaker maker) {
  return [maker](const CacheConfig& c,
                 const store::StreamInfo& s) -> std::unique_ptr<store::RowCodec> {
    const int64_t D = s.head_dim;
    check_dim(c, D);
    std::unique_ptr<transform::RowCoder> coder = maker(c, D)(D, s.kv);
    const PcaGeometry g = pca_geometry(c, D);
    if (dynamic_cast<transform::FixedRulePcaCoder*>(coder.get()) != nullptr)
      // FixedRulePcaCoder's inner coder reads with default settings (Huffman streams).
      return std::make_unique<PcaCodec>(D, std::move(coder), transform::PcaSettings{}, stream_id(s),
                                        g);
    if (dynamic_cast<transform::Fp16RowCoder*>(coder.get()) != nullptr)
      return std::make_unique<store::Fp16Codec>(D, g.chunk, 0, 0, g.fit);
    if (dynamic_cast<transform::GearRowCoder*>(coder.get()) != nullptr)
      return make_gear_row_codec(c, s);
    VQ_THROW(InvalidArgument, c.method(), ": no resident row codec for this stream's coder (",
             s.kv == 0 ? "keys" : "values", ")");
  };
}

}  // namespace vq::codecs

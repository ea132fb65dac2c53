#include "codecs/pca_codec.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif
// The 512-bit latent kernels need a byte permutation across the whole register (VBMI).
#if defined(__AVX2__) && defined(__FMA__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512DQ__) && defined(__AVX512VL__) && defined(__AVX512VBMI__) && defined(__BMI2__)
#define VQ_PCA_WIDE 1
#endif

#include "codecs/bit_pack.hpp"
#include "codecs/gear_codec.hpp"
#include "coding/bit_allocation.hpp"
#include "coding/byte_io.hpp"
#include "coding/huffman.hpp"
#include "coding/latent_kernels.hpp"
#include "coding/quantizer.hpp"
#include "core/static_count.hpp"
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
  build_groups();
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

void PcaCodec::build_groups() {
  const int64_t k = kept(), G = (k + 7) / 8;
#if defined(VQ_PCA_WIDE)
  // The 512-bit value sums (two or more groups) read groups 2p and 2p + 1's shifts and masks as
  // one 16-lane row of these tables: an even number of groups (the padding group's masks are 0).
  pair_groups_ = G >= 2;
  const int64_t G_shift = pair_groups_ ? 2 * ((G + 1) / 2) : G;
#else
  const int64_t G_shift = G;
#endif
  group_win_.assign(static_cast<size_t>(G), 0);
  group_shuf_.assign(static_cast<size_t>(G * 32), 0x80);  // 0x80: the lane byte is zero
  group_shift_.assign(static_cast<size_t>(G_shift * 8), 0);
  group_mask_.assign(static_cast<size_t>(G_shift * 8), 0);
  for (int64_t g = 0; g < G; ++g) {
    const uint32_t win = bit_off_[static_cast<size_t>(8 * g)] >> 3;
    group_win_[static_cast<size_t>(g)] = static_cast<int32_t>(win);
    for (int64_t l = 0; l < 8 && 8 * g + l < k; ++l) {
      const size_t j = static_cast<size_t>(8 * g + l);
      // eight codes of <= 8 bits span at most 9 bytes from the window's start: byte b + 1 <= 9
      const auto b = static_cast<uint8_t>((bit_off_[j] >> 3) - win);
      uint8_t* lane = group_shuf_.data() + 32 * g + (l < 4 ? 4 * l : 16 + 4 * (l - 4));
      lane[0] = b;
      lane[1] = static_cast<uint8_t>(b + 1);
      group_shift_[static_cast<size_t>(8 * g + l)] = static_cast<int32_t>(bit_off_[j] & 7u);
      group_mask_[static_cast<size_t>(8 * g + l)] = (1 << widths_[j]) - 1;
    }
  }
  // The scores' codes, moved up to 8 bits (code_j << (8 - b_j) < 256), and their levels:
  // sum_j |level_j| (code_j << shift_j) <= score_levels_ 255 k < 2^31.
  score_shift_.assign(static_cast<size_t>(k), 0);
  score_unshift_.assign(static_cast<size_t>(k), 1.0f);
  for (int64_t j = 0; j < k; ++j) {
    const int sh = 8 - widths_[static_cast<size_t>(j)];
    score_shift_[static_cast<size_t>(j)] = static_cast<uint8_t>(sh);
    score_unshift_[static_cast<size_t>(j)] = std::ldexp(1.0f, -sh);
  }
  score_levels_ = static_cast<int32_t>(std::min<int64_t>(
      32767, std::numeric_limits<int32_t>::max() / (255 * std::max<int64_t>(1, k))));
#if !defined(VQ_PCA_WIDE)
  return;  // the 16-lane permutations serve the 512-bit kernels only
#endif
  build_units();
  // The value sums' 16-lane permutations. A lane takes bytes (b, b + 1) of its 64-byte window and
  // repeats b + 1 in the rest of its dword (the mask clears those bits). b <= 63 always; b + 1 is
  // taken mod 64 (as the permutation does): it is 64 only for a code that ends in byte 63 and so
  // never reads its second byte. Shifts and masks are group_shift_ / group_mask_'s own.
  const auto set_lane = [](uint8_t* idx, int lane, int b) {
    idx[4 * lane] = static_cast<uint8_t>(b);
    for (int i = 1; i < 4; ++i) idx[4 * lane + i] = static_cast<uint8_t>((b + 1) & 63);
  };
  const auto lane_byte = [&](int64_t g, int l) {  // code 8g + l's byte within group g's window
    const size_t j = static_cast<size_t>(8 * g + l);
    return 8 * g + l < k ? static_cast<int>((bit_off_[j] >> 3) - group_win_[static_cast<size_t>(g)])
                         : 0;
  };
  const int64_t rb = row_bytes_;
  // Value sums: two groups of a row per register, read from group 2p's window, or from the
  // row's start when the whole row fits 64 bytes (rb < 64). One group alone keeps the
  // eight-lane kernel (a pair would be half padding).
  const int64_t P = pair_groups_ ? (G + 1) / 2 : 0;
  gpair_whole_ = rb < 64;
  gpair_win_.assign(static_cast<size_t>(P), 0);
  gpair_idx_.assign(static_cast<size_t>(P * 64), 0);
  for (int64_t p = 0; p < P; ++p) {
    const int32_t win = gpair_whole_ ? 0 : group_win_[static_cast<size_t>(2 * p)];
    gpair_win_[static_cast<size_t>(p)] = win;
    for (int half = 0; half < 2 && 2 * p + half < G; ++half) {
      const int64_t g = 2 * p + half;
      // group g's window starts at most 8 bytes after group 2p's (or within the row)
      const int shift = group_win_[static_cast<size_t>(g)] - win;
      for (int l = 0; l < 8; ++l)
        set_lane(gpair_idx_.data() + 64 * p, 8 * half + l, lane_byte(g, l) + shift);
    }
  }
}

void PcaCodec::build_units() {
  // Unit u: codes 4u .. 4u + 3 (fewer in the last), its 8 bytes read from byte first[u]; its
  // codes end by bit 7 + 4 * 8 = 39 of them. last[u]: the last byte a code of the unit uses.
  const int64_t k = kept(), rb = row_bytes_, U = (k + 3) / 4, Z = (U + 3) / 4;
  std::vector<int64_t> first(static_cast<size_t>(U)), last(static_cast<size_t>(U));
  for (int64_t u = 0; u < U; ++u) {
    const auto j_end = static_cast<size_t>(std::min(k, 4 * u + 4) - 1);
    first[static_cast<size_t>(u)] = bit_off_[static_cast<size_t>(4 * u)] >> 3;
    last[static_cast<size_t>(u)] = (bit_off_[j_end] + widths_[j_end] - 1) >> 3;
  }
  unit_whole_ = 2 * rb <= 64;
  unit_pairs_ = U > 0;
  for (int64_t z = 0; z < Z && unit_pairs_ && !unit_whole_; ++z)  // row t + 1's bytes in reach
    for (int64_t u = 4 * z; u < std::min(U, 4 * z + 4); ++u)
      unit_pairs_ &= rb + last[static_cast<size_t>(u)] - first[static_cast<size_t>(4 * z)] <= 63;
  unit_win_.clear();
  unit_idx_.clear();
  unit_ctl_.clear();
  unit_mask_.clear();
  if (!unit_pairs_) return;
  unit_win_.assign(static_cast<size_t>(Z), 0);
  unit_idx_.assign(static_cast<size_t>(Z * 32), 0);
  unit_ctl_.assign(static_cast<size_t>(Z * 32), 0);
  unit_mask_.assign(static_cast<size_t>(Z * 32), 0);
  for (int64_t z = 0; z < Z; ++z) {
    const int64_t win = unit_whole_ ? 0 : first[static_cast<size_t>(4 * z)];
    unit_win_[static_cast<size_t>(z)] = static_cast<int32_t>(win);
    for (int64_t u = 4 * z; u < std::min(U, 4 * z + 4); ++u) {
      const int64_t b = first[static_cast<size_t>(u)], lane = 8 * (u - 4 * z);
      // row t's bytes (the kernels add rb for row t + 1's half); bytes past the unit's last are
      // never looked at (masked off): they read byte 0
      for (int64_t m = 0; m <= last[static_cast<size_t>(u)] - b; ++m)
        unit_idx_[static_cast<size_t>(32 * z + lane + m)] = static_cast<uint8_t>(b - win + m);
      // code j, moved up by its score shift: the byte from bit offset - shift (taken mod 64 by
      // the multishift; the bits below the code's own are masked off)
      for (int64_t j = 4 * u; j < std::min(k, 4 * u + 4); ++j) {
        const auto at = static_cast<size_t>(32 * z + lane + 2 * (j - 4 * u));
        const int sh = score_shift_[static_cast<size_t>(j)];
        unit_ctl_[at] = static_cast<uint8_t>((bit_off_[static_cast<size_t>(j)] - 8 * b - sh) & 63);
        unit_mask_[at] = static_cast<uint8_t>(((1u << widths_[static_cast<size_t>(j)]) - 1u) << sh);
      }
    }
  }
}

int64_t PcaCodec::unpack_table_bytes() const {
  return static_cast<int64_t>(
      4 * (group_win_.capacity() + group_shift_.capacity() + group_mask_.capacity()) +
      group_shuf_.capacity() + 4 * (unit_win_.capacity() + gpair_win_.capacity()) +
      unit_idx_.capacity() + unit_ctl_.capacity() + unit_mask_.capacity() + gpair_idx_.capacity());
}

int64_t PcaCodec::state_bytes() const {
  return unpack_table_bytes() +
         static_cast<int64_t>(4 * (own_mean_.capacity() + own_basis_.capacity()) +
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
  // The same arithmetic as PcaRowCoder::encode_chunk: center, coding::project_rows,
  // per-component affine. The transposed basis is built per call (a chunk's 128 rows cost 128x
  // its copy) rather than held, so that the codec's resident state stays the model alone; like the
  // other buffers here it lives for the call only.
  std::vector<float> basis_t(static_cast<size_t>(k * D)), lat_t(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < k; ++j)
    for (int64_t d = 0; d < D; ++d)
      basis_t[static_cast<size_t>(d * k + j)] = basis_rows_[static_cast<size_t>(j)][d];
  Eigen::Map<const RowMatF> X(rows, n, D);
  const Eigen::Map<const Eigen::RowVectorXf> mean(mean_, D);
  const RowMatF Xc = X.rowwise() - mean;
  coding::project_rows(Xc.data(), n, D, basis_t.data(), k, lat_t.data());
  RowMatF L(k, n);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) L(j, t) = lat_t[static_cast<size_t>(t * k + j)];
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

namespace {

// Sums over 16 lanes in one fixed order, with or without AVX-512: term j in lane j % 16, added in
// j order per lane (the last group's missing terms count as zero), then lanes l and l + 8, l and
// l + 4, l and l + 2, l and l + 1 added. Per chunk these replace chains of k (or n) dependent
// additions: a chunk's query and weights cost this once per 128 rows and query head.
inline float fold16(float* l) {
  for (int width = 8; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) l[i] += l[i + width];
  return l[0];
}

// sum_j a[j] b[j], multiply-adds per lane
inline float lane_dot16(const float* a, const float* b, int64_t k) {
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= k; j += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + j), _mm512_loadu_ps(b + j), acc);
  if (j < k) {
    const __mmask16 m = static_cast<__mmask16>((1u << (k - j)) - 1u);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + j), _mm512_maskz_loadu_ps(m, b + j), acc);
  }
  alignas(64) float l[16];
  _mm512_store_ps(l, acc);
#else
  float l[16] = {};
  for (int64_t j0 = 0; j0 < k; j0 += 16)
    for (int64_t i = 0; i < 16; ++i)
      l[i] = j0 + i < k ? madd(a[j0 + i], b[j0 + i], l[i]) : madd(0.0f, 0.0f, l[i]);
#endif
  return fold16(l);
}

// sum_t w[t]
inline float lane_sum16(const float* w, int64_t n) {
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  int64_t t = 0;
  for (; t + 16 <= n; t += 16) acc = _mm512_add_ps(acc, _mm512_loadu_ps(w + t));
  if (t < n)
    acc = _mm512_add_ps(acc,
                        _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (n - t)) - 1u), w + t));
  alignas(64) float l[16];
  _mm512_store_ps(l, acc);
#else
  float l[16] = {};
  for (int64_t t0 = 0; t0 < n; t0 += 16)
    for (int64_t i = 0; i < 16; ++i) l[i] += t0 + i < n ? w[t0 + i] : 0.0f;
#endif
  return fold16(l);
}

}  // namespace

void PcaCodec::chunk_ranges(const uint8_t* params, float* mins, float* scales) const {
  const int64_t k = kept();
  if (fixed_ranges_) {
    for (int64_t j = 0; j < k; ++j) {
      mins[j] = fixed_[static_cast<size_t>(j)].min;
      scales[j] = fixed_[static_cast<size_t>(j)].scale;
    }
    return;
  }
  // (min, scale) pairs as stored, de-interleaved (unaligned: loadu, or byte-wise by memcpy)
  int64_t j0 = 0;
#if defined(__AVX512F__)
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (; j0 + 16 <= k; j0 += 16) {
    const __m512 a = _mm512_loadu_ps(params + 8 * j0), b = _mm512_loadu_ps(params + 8 * j0 + 64);
    _mm512_storeu_ps(mins + j0, _mm512_permutex2var_ps(a, even, b));
    _mm512_storeu_ps(scales + j0, _mm512_permutex2var_ps(a, odd, b));
  }
#endif
  for (int64_t j = j0; j < k; ++j) {
    std::memcpy(mins + j, params + 8 * j, 4);
    std::memcpy(scales + j, params + 8 * j + 4, 4);
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

// f(t, codes) for rows t < n in order, codes: row t's k codes as floats (the scalar paths).
template <class F>
void each_row_codes(const uint8_t* codes, int64_t n, int64_t rb, const uint32_t* bit_off,
                    const uint8_t* widths, int64_t k, F&& f) {
  thread_local std::vector<float> code;
  thread_local std::vector<uint8_t> pad;
  code.resize(static_cast<size_t>(k));
  pad.assign(static_cast<size_t>(rb + 8), 0);
  for (int64_t t = 0; t < n; ++t) {
    row_codes_f32(codes + t * rb, rb, bit_off, widths, k, pad.data(), code.data());
    f(t, static_cast<const float*>(code.data()));
  }
}

#if defined(__AVX2__) && defined(__FMA__)
// The codes of components 8g .. 8g + 7 of a row as eight int32 lanes (0 past the last
// component): the 16 bytes of the group's window, in both 128-bit halves, then a byte shuffle
// that moves each code's two bytes into its lane, a shift and a mask. Reads row[win, win + 16).
struct GroupTables {
  const int32_t* win;
  const uint8_t* shuf;
  const int32_t* shift;
  const int32_t* mask;
};

// Group g's tables in registers (loaded once when several rows share them).
struct GroupRegs {
  __m256i shuf, shift, mask;
  GroupRegs(const GroupTables& t, int64_t g)
      : shuf(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.shuf + 32 * g))),
        shift(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.shift + 8 * g))),
        mask(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.mask + 8 * g))) {}
};

// The codes of the 16-byte window at `window` under group tables r.
inline __m256i window_codes(const uint8_t* window, const GroupRegs& r) {
  const __m256i bytes =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(window)));
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(bytes, r.shuf), r.shift), r.mask);
}

inline __m256i group_codes(const uint8_t* row, const GroupTables& t, int64_t g) {
  return window_codes(row + t.win[g], GroupRegs(t, g));
}

// The sum of the eight 32-bit lanes (exact: any order).
inline int32_t isum8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// levels a[0, k) as the eight-lane kernels' 32-bit lanes: a_j << shift_j (times code_j: the
// product the scores' shifted code makes)
inline void shifted_levels(const int16_t* a, int64_t k, const uint8_t* shift, int32_t* out) {
  for (int64_t j = 0; j < k; ++j) out[j] = static_cast<int32_t>(a[j]) * (1 << shift[j]);
}

// acc + code_l level_l per 32-bit lane (levels already shifted: level_j << shift_j; exact).
inline __m256i add_products(__m256i acc, __m256i codes, __m256i levels) {
  return _mm256_add_epi32(acc, _mm256_mullo_epi32(codes, levels));
}

// n rows of rb bytes; a row's group windows reach `reach` bytes from its start, and rows whose
// windows would read past the buffer are copied to `pad` (zeroed past rb bytes) first.
struct Rows {
  const uint8_t* codes;
  int64_t n, rb, reach;
  uint8_t* pad;
  const uint8_t* row(int64_t t) const {
    const uint8_t* r = codes + t * rb;
    if (t * rb + reach <= n * rb) return r;
    std::memcpy(pad, r, static_cast<size_t>(rb));
    return pad;
  }
};

// lat8[8 (g0 + i) + l] += w_t code_t(8 (g0 + i) + l) for i < NG, rows in order, the NG groups'
// sums held in registers across the rows.
template <int NG>
void axpy_groups(const Rows& rows, const float* w, const GroupTables& tab, int64_t g0,
                 float* lat8) {
  __m256 acc[NG];
  for (int i = 0; i < NG; ++i) acc[i] = _mm256_loadu_ps(lat8 + 8 * (g0 + i));
  for (int64_t t = 0; t < rows.n; ++t) {
    const uint8_t* row = rows.row(t);
    const __m256 wv = _mm256_set1_ps(w[t]);
    for (int i = 0; i < NG; ++i)
      acc[i] = _mm256_fmadd_ps(wv, _mm256_cvtepi32_ps(group_codes(row, tab, g0 + i)), acc[i]);
  }
  for (int i = 0; i < NG; ++i) _mm256_storeu_ps(lat8 + 8 * (g0 + i), acc[i]);
}
#endif

#if defined(VQ_PCA_WIDE)
// The value sums' 16-lane unpack tables (PcaCodec's gpair_*): entry e's window start and its
// 64-byte permutation; the shifts and masks are the eight-lane tables' (PcaCodec's group_*):
// pair p reads 16 of them from 16 p (groups 2p, 2p + 1). (The scores use UnitTables below.)
struct WideTables {
  const int32_t* win;
  const uint8_t* idx;
  const int32_t* shift;  // group_shift_
  const int32_t* mask;   // group_mask_
  bool whole;            // every window is 0: one load serves every entry
};

// The scores' 512-bit tables (PcaCodec's unit_*): register z's window start, its byte
// permutation, multishift control and width masks.
struct UnitTables {
  const int32_t* win;
  const uint8_t* idx;
  const uint8_t* ctl;
  const uint8_t* mask;
  bool whole;  // every window is 0: one load of a row pair serves every register
};

// acc + the products of a and b's 16-bit lanes, summed in pairs into the 32-bit lanes (exact).
inline __m512i add_pair_products(__m512i acc, __m512i a, __m512i b) {
#if defined(__AVX512VNNI__)
  // In place (GCC 12 copies each accumulator around the intrinsic's destructive form: two
  // register moves per product in the scores' loop).
  __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "vm"(b));
  return acc;
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}

// The sums of the eight 32-bit lanes of rows 0 .. 7 (a = rows 0, 1 in its 256-bit halves; b rows
// 2, 3; c rows 4, 5; d rows 6, 7), row r's sum in lane r (integers: exact in any order).
// (The zero-masked forms with every lane selected: GCC 12's plain forms pass an undefined
// source that -Wuninitialized reports.)
inline __m256i isum8_rows8(__m512i a, __m512i b, __m512i c, __m512i d) {
  constexpr __mmask16 kAll = 0xFFFF;
  // 128-bit blocks: [a0 + a1, a2 + a3, b0 + b1, b2 + b3]: four partial sums of rows 0 .. 3
  // (rows 4 .. 7 from c, d)
  const __m512i sab = _mm512_add_epi32(_mm512_maskz_shuffle_i32x4(kAll, a, b, 0x88),
                                       _mm512_maskz_shuffle_i32x4(kAll, a, b, 0xDD));
  const __m512i scd = _mm512_add_epi32(_mm512_maskz_shuffle_i32x4(kAll, c, d, 0x88),
                                       _mm512_maskz_shuffle_i32x4(kAll, c, d, 0xDD));
  // block k: [x0 + x2, y0 + y2, x1 + x3, y1 + y3] of x = row k's sums and y = row 4 + k's
  const __m512i h = _mm512_add_epi32(_mm512_maskz_unpacklo_epi32(kAll, sab, scd),
                                     _mm512_maskz_unpackhi_epi32(kAll, sab, scd));
  // block k: [row k, row 4 + k, (again)]
  const __m512i r = _mm512_add_epi32(h, _mm512_maskz_shuffle_epi32(kAll, h, _MM_PERM_BADC));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_maskz_extracti64x4_epi64(0xF, _mm512_maskz_permutexvar_epi32(kAll, order, r), 0);
}

// 64 bytes from p; bytes at or past `end` are not read (a masked load) and come back as 0.
inline __m512i load64(const uint8_t* p, const uint8_t* end) {
  const int64_t left = end - p;
  if (left >= 64) return _mm512_loadu_si512(p);
  return _mm512_maskz_loadu_epi8(_bzhi_u64(~uint64_t{0}, static_cast<unsigned>(left)), p);
}

// Entry e's 16 codes as floats from its window's 64 bytes.
inline __m512 wide_codes(__m512i window, const WideTables& t, int64_t e) {
  const __m512i bytes = _mm512_permutexvar_epi8(_mm512_loadu_si512(t.idx + 64 * e), window);
  const __m512i c = _mm512_and_si512(_mm512_srlv_epi32(bytes, _mm512_loadu_si512(t.shift + 16 * e)),
                                     _mm512_loadu_si512(t.mask + 16 * e));
  return _mm512_cvtepi32_ps(c);
}

// The scores on two rows per register (lanes 0-7 row t, 8-15 row t + 1; unit tables), NR row
// pairs per step, NQ queries. lv + 32 (q Z + z): query q's levels of register z's 16 codes, in
// both halves. Per row the exact sum_j level_j code_j, then fma(step_q, sum, c0_q). The NR x NQ
// accumulators are independent chains (Z long). `full`: every window of the step lies in the
// buffer (plain loads); otherwise bytes past `end` are masked off and read as 0. ZC > 0 is Z known
// at compile time (0: Z at run time).
template <int NQ, int NR, bool full, bool whole, int ZC>
inline void unit_dots_step(const uint8_t* r, int64_t rb, const uint8_t* end, const UnitTables& tab,
                           int64_t Zrun, const int16_t* lv, const float* step, const float* c0,
                           float* out, int64_t out_stride, int64_t rows) {
  const int64_t Z = ZC > 0 ? ZC : Zrun;
  const auto load = [&](const uint8_t* at) {
    return full ? _mm512_loadu_si512(at) : load64(at, end);
  };
  __m512i acc[NR][NQ];
  for (auto& ar : acc)
    for (auto& a : ar) a = _mm512_setzero_si512();
  const __m512i second = _mm512_maskz_set1_epi8(0xFFFFFFFF00000000ull, static_cast<char>(rb));
  __m512i pair[NR];  // whole: each row pair's bytes, read once for every register
  if (whole)
    for (int p = 0; p < NR; ++p) pair[p] = load(r + 2 * p * rb);
  // (zero-masked forms with every lane selected: with Z compiled in, GCC 12 inlines the plain
  // forms' undefined sources where -Wuninitialized reports them)
  constexpr __mmask8 kAll8 = 0xFF;
  constexpr __mmask64 kAll64 = ~__mmask64{0};
  for (int64_t z = 0; z < Z; ++z) {
    const __m512i idx = _mm512_add_epi8(
        _mm512_maskz_broadcast_i64x4(
            kAll8, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tab.idx + 32 * z))),
        second);
    const __m512i ctl = _mm512_maskz_broadcast_i64x4(
        kAll8, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tab.ctl + 32 * z)));
    const __m512i mask = _mm512_maskz_broadcast_i64x4(
        kAll8, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tab.mask + 32 * z)));
    for (int p = 0; p < NR; ++p) {
      const __m512i bytes = whole ? pair[p] : load(r + tab.win[z] + 2 * p * rb);
      const __m512i c =
          _mm512_and_si512(_mm512_maskz_multishift_epi64_epi8(
                               kAll64, ctl, _mm512_maskz_permutexvar_epi8(kAll64, idx, bytes)),
                           mask);
      for (int q = 0; q < NQ; ++q)
        acc[p][q] = add_pair_products(acc[p][q], c, _mm512_loadu_si512(lv + 32 * (q * Z + z)));
    }
  }
  if constexpr (NR == 4) {  // eight full rows: each query's eight sums reduced together
    for (int q = 0; q < NQ; ++q)
      _mm256_storeu_ps(out + q * out_stride,
                       _mm256_fmadd_ps(_mm256_set1_ps(step[q]),
                                       _mm256_cvtepi32_ps(
                                           isum8_rows8(acc[0][q], acc[1][q], acc[2][q], acc[3][q])),
                                       _mm256_set1_ps(c0[q])));
    return;
  }
  for (int64_t h = 0; h < std::min<int64_t>(2 * NR, rows); ++h)
    for (int q = 0; q < NQ; ++q) {
      const int32_t sum = _mm512_mask_reduce_add_epi32(h % 2 == 0 ? 0x00FF : 0xFF00, acc[h / 2][q]);
      out[q * out_stride + h] = std::fma(step[q], static_cast<float>(sum), c0[q]);
    }
}

template <int NQ, int ZC>
void unit_dots_many(const uint8_t* codes, int64_t n, int64_t rb, const UnitTables& tab, int64_t Z,
                    const int16_t* lv, const float* step, const float* c0, float* out,
                    int64_t out_stride) {
  static_assert(NQ <= 4, "at most 16 accumulators");
  constexpr int NR = 4;
  const uint8_t* end = codes + n * rb;
  // a step's last window ends at most (2 NR - 1) rb + win[Z - 1] + 64 bytes from its first row;
  // steps nearer the end read through masked loads (the integer sums are the same bits either way)
  const int64_t reach = 2 * (NR - 1) * rb + tab.win[Z - 1] + 64;
  int64_t t = 0;
  for (; t + 2 * NR <= n; t += 2 * NR) {
    const bool inside = t * rb + reach <= n * rb;
    if (tab.whole && inside)
      unit_dots_step<NQ, NR, true, true, ZC>(codes + t * rb, rb, end, tab, Z, lv, step, c0, out + t,
                                             out_stride, 2 * NR);
    else if (tab.whole)
      unit_dots_step<NQ, NR, false, true, ZC>(codes + t * rb, rb, end, tab, Z, lv, step, c0,
                                              out + t, out_stride, 2 * NR);
    else if (inside)
      unit_dots_step<NQ, NR, true, false, ZC>(codes + t * rb, rb, end, tab, Z, lv, step, c0,
                                              out + t, out_stride, 2 * NR);
    else
      unit_dots_step<NQ, NR, false, false, ZC>(codes + t * rb, rb, end, tab, Z, lv, step, c0,
                                               out + t, out_stride, 2 * NR);
  }
  for (; t < n; t += 2)  // the last rows, a pair at a time (an odd last row: zeros beside it)
    unit_dots_step<NQ, 1, false, false, ZC>(codes + t * rb, rb, end, tab, Z, lv, step, c0, out + t,
                                            out_stride, n - t);
}

// axpy_groups_many on two groups per register (gpair tables: pair p = groups 2p, 2p + 1), pairs
// p0 .. p0 + NP - 1: per lane the multiply-adds of the eight-lane kernel, rows in order.
// lat16 + 16 (q P + p): weight row q's sums of pair p (component c at lat16[q P 16 + c]).
// Whole (every window is 0: one load of a row serves every pair) is a template parameter and the
// loops over the accumulators are unrolled by pragma: with a run-time test per pair and rolled
// loops GCC 12 kept the accumulators in memory as well and stored every one of them on every row
// (micro_codec's kvtc value sums at n = 4096, D = 64, 4 queries, interleaved: 61-68 -> 31-32 µs).
// The pairs' tables (byte permutation, shifts, masks) are loaded once per call rather than per row,
// and the rows whose windows all lie inside the buffer take plain loads (no test against its end
// per row): GqaAttention/1/2 21.0 -> 17.4 µs (fastest of 5, interleaved; session 22).
template <int NW, int NP, bool Whole>
void axpy_pairs_many(const uint8_t* codes, int64_t n, int64_t rb, const float* w, int64_t w_stride,
                     const WideTables& tab, int64_t P, int64_t p0, float* lat16) {
  const uint8_t* end = codes + n * rb;
  __m512 acc[NW][NP];
#pragma GCC unroll 8
  for (int q = 0; q < NW; ++q)
#pragma GCC unroll 8
    for (int i = 0; i < NP; ++i) acc[q][i] = _mm512_loadu_ps(lat16 + 16 * (q * P + p0 + i));
  // the pairs' tables, read once for all rows
  __m512i idx[NP], shift[NP], mask[NP];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) {
    idx[i] = _mm512_loadu_si512(tab.idx + 64 * (p0 + i));
    shift[i] = _mm512_loadu_si512(tab.shift + 16 * (p0 + i));
    mask[i] = _mm512_loadu_si512(tab.mask + 16 * (p0 + i));
  }
  const auto row = [&](int64_t t, auto full) {
    const uint8_t* r = codes + t * rb;
    __m512 wv[NW];
#pragma GCC unroll 8
    for (int q = 0; q < NW; ++q) wv[q] = _mm512_set1_ps(w[q * w_stride + t]);
    const auto load = [&](const uint8_t* at) {
      return decltype(full)::value ? _mm512_loadu_si512(at) : load64(at, end);
    };
    const __m512i whole = Whole ? load(r) : _mm512_setzero_si512();  // read once
#pragma GCC unroll 8
    for (int i = 0; i < NP; ++i) {
      const __m512i bytes =
          _mm512_permutexvar_epi8(idx[i], Whole ? whole : load(r + tab.win[p0 + i]));
      const __m512 c =
          _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srlv_epi32(bytes, shift[i]), mask[i]));
#pragma GCC unroll 8
      for (int q = 0; q < NW; ++q) acc[q][i] = _mm512_fmadd_ps(wv[q], c, acc[q][i]);
    }
  };
  // rows whose every window lies in the buffer take plain loads
  int64_t reach = 64;
  for (int i = 0; i < NP; ++i) reach = std::max<int64_t>(reach, tab.win[p0 + i] + 64);
  int64_t t = 0;
  for (; t < n && t * rb + reach <= n * rb; ++t) row(t, std::true_type{});
  for (; t < n; ++t) row(t, std::false_type{});
#pragma GCC unroll 8
  for (int q = 0; q < NW; ++q)
#pragma GCC unroll 8
    for (int i = 0; i < NP; ++i) _mm512_storeu_ps(lat16 + 16 * (q * P + p0 + i), acc[q][i]);
}

// Pairs 0 .. P - 1 in runs of at most NP (accumulators: NW x NP <= 24 of the 32 registers).
template <int NW, int... NPs>
void axpy_pair_runs_of(std::integer_sequence<int, NPs...>, const uint8_t* codes, int64_t n,
                       int64_t rb, const float* w, int64_t w_stride, const WideTables& tab,
                       int64_t P, float* lat16) {
  using Fn = void (*)(const uint8_t*, int64_t, int64_t, const float*, int64_t, const WideTables&,
                      int64_t, int64_t, float*);
  constexpr Fn kRun[] = {axpy_pairs_many<NW, NPs + 1, false>...};
  constexpr Fn kRunWhole[] = {axpy_pairs_many<NW, NPs + 1, true>...};
  constexpr int64_t kMax = sizeof...(NPs);
  for (int64_t p0 = 0; p0 < P; p0 += kMax) {
    if (tab.whole)
      kRunWhole[std::min(kMax, P - p0) - 1](codes, n, rb, w, w_stride, tab, P, p0, lat16);
    else
      kRun[std::min(kMax, P - p0) - 1](codes, n, rb, w, w_stride, tab, P, p0, lat16);
  }
}
template <int NW>
void axpy_pair_runs(const uint8_t* codes, int64_t n, int64_t rb, const float* w, int64_t w_stride,
                    const WideTables& tab, int64_t P, float* lat16) {
  axpy_pair_runs_of<NW>(std::make_integer_sequence<int, std::min(8, 24 / NW)>{}, codes, n, rb, w,
                        w_stride, tab, P, lat16);
}

// A query's levels a[0, k) as unit_dots_many's rows: register z's 16 levels in both halves.
inline void fill_unit_levels(const int16_t* a, int64_t k, int64_t Z, int16_t* lv) {
  for (int64_t z = 0; z < Z; ++z) {
    const int64_t m = std::min<int64_t>(16, k - 16 * z);
    const __m256i v = _mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << m) - 1u), a + 16 * z);
    _mm512_storeu_si512(lv + 32 * z, _mm512_broadcast_i64x4(v));
  }
}

// unit_dots_many with Z (16-code registers per row) fixed at compile time up to 8 (head dims up
// to 128), so that the loops over the registers unroll and the levels can stay in registers:
// micro_codec GqaAttention/1/1 (kvtc scores, 4096 rows, D = 64, 4 queries, one thread) 26.7 ->
// 20.2 µs (fastest of 5, interleaved with the run-time Z).
template <int NQ>
void unit_dots_any(const uint8_t* codes, int64_t n, int64_t rb, const UnitTables& tab, int64_t Z,
                   const int16_t* lv, const float* step, const float* c0, float* out,
                   int64_t out_stride) {
  if (Z < 1 || Z > 8)  // (callers have k > 0, so Z >= 1)
    return unit_dots_many<NQ, 0>(codes, n, rb, tab, Z, lv, step, c0, out, out_stride);
  with_static_count<8>(Z, [&](auto zc) {
    unit_dots_many<NQ, decltype(zc)::value>(codes, n, rb, tab, Z, lv, step, c0, out, out_stride);
  });
}
using DotWideFn = void (*)(const uint8_t*, int64_t, int64_t, const UnitTables&, int64_t,
                           const int16_t*, const float*, const float*, float*, int64_t);
constexpr int64_t kMaxWide = 4;  // queries per 512-bit scores call (16 accumulators)
constexpr DotWideFn kDotWide[] = {nullptr, unit_dots_any<1>, unit_dots_any<2>, unit_dots_any<3>,
                                  unit_dots_any<4>};
using AxpyWideFn = void (*)(const uint8_t*, int64_t, int64_t, const float*, int64_t,
                            const WideTables&, int64_t, float*);
constexpr AxpyWideFn kAxpyWide[] = {nullptr,           axpy_pair_runs<1>, axpy_pair_runs<2>,
                                    axpy_pair_runs<3>, axpy_pair_runs<4>, axpy_pair_runs<5>,
                                    axpy_pair_runs<6>, axpy_pair_runs<7>, axpy_pair_runs<8>};
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

float PcaCodec::chunk_query(const float* q, int64_t slot, const float* mins, const float* scales,
                            float* w) const {
  const int64_t D = dim(), k = kept();
  constexpr int64_t kSlots = 16;
  thread_local QueryMemo memos[kSlots];
  QueryMemo& memo = memos[slot % kSlots];
  const size_t Dz = static_cast<size_t>(D);
  if (memo.model != model_id_ || memo.q.size() != Dz ||
      std::memcmp(memo.q.data(), q, sizeof(float) * Dz) != 0) {
    memo.model = model_id_;
    memo.q.assign(q, q + D);
    memo.proj.resize(static_cast<size_t>(k));
    // 16 lanes per dot (lane_dot16: the same bits with or without AVX-512), not one chain of D
    // dependent multiply-adds: decode projects every new query once per KV head and layer, and
    // k chains of D = 64 took about 5 µs a query (5% of a Q4_K kvtc step at 4096, perf).
    for (int64_t j = 0; j < k; ++j)
      memo.proj[static_cast<size_t>(j)] = lane_dot16(basis_rows_[static_cast<size_t>(j)], q, D);
    memo.mean_dot = lane_dot16(mean_, q, D);
  }
  // c0 = mean . q + sum_j min_j q'_j, w_j = scale_j q'_j. The sum runs in 16 lanes (component j
  // in lane j % 16, the last group padded with zero products), the lanes added pairwise in a
  // fixed order: the same bits with or without AVX-512, and no chain of k dependent
  // multiply-adds per chunk (a chunk's query costs this once per 128 rows and query head).
  const float* proj = memo.proj.data();
  for (int64_t j = 0; j < k; ++j) w[j] = scales[j] * proj[j];
  return memo.mean_dot + lane_dot16(mins, proj, k);
}

float PcaCodec::score_weights(const float* w, int16_t* a) const {
  // big = max_j |w_j| and a_j = round-to-nearest-even(w_j * inv), clamped to +-L: the same
  // operations per weight with or without AVX-512 (the vector conversion rounds as
  // std::nearbyint does in the default rounding mode), so the levels are the same bits.
  const int64_t k = kept();
  const float L = static_cast<float>(score_levels_);
  const float* unshift = score_unshift_.data();
  float big = 0.0f;
  bool finite = true;
  int64_t j = 0;
#if defined(__AVX512F__)
  __m512 vbig = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (; j < k; j += 16) {
    const auto m = static_cast<__mmask16>(k - j >= 16 ? 0xFFFF : (1u << (k - j)) - 1u);
    const __m512 v = _mm512_abs_ps(
        _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + j), _mm512_maskz_loadu_ps(m, unshift + j)));
    bad |= _mm512_cmp_ps_mask(v, _mm512_set1_ps(std::numeric_limits<float>::max()), _CMP_NLE_UQ);
    vbig = _mm512_max_ps(vbig, v);
  }
  big = _mm512_reduce_max_ps(vbig);
  finite = bad == 0;
#else
  for (; j < k; ++j) {
    const float v = std::fabs(w[j] * unshift[j]);
    finite &= v <= std::numeric_limits<float>::max();
    big = std::max(big, v);
  }
#endif
  if (!finite || big == 0.0f) {
    std::fill_n(a, k, int16_t{0});
    // not finite: the scores are NaN, as fp32's would be
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  const float inv = static_cast<float>(std::min<double>(
      static_cast<double>(L) / static_cast<double>(big), std::numeric_limits<float>::max()));
  j = 0;
#if defined(__AVX512F__)
  for (; j + 16 <= k; j += 16) {
    const __m512 v = _mm512_min_ps(
        _mm512_max_ps(
            _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(w + j), _mm512_loadu_ps(unshift + j)),
                          _mm512_set1_ps(inv)),
            _mm512_set1_ps(-L)),
        _mm512_set1_ps(L));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + j),
                        _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(v)));
  }
#endif
  for (; j < k; ++j)
    a[j] = static_cast<int16_t>(std::nearbyint(std::clamp(w[j] * unshift[j] * inv, -L, L)));
  return static_cast<float>(static_cast<double>(big) / static_cast<double>(L));
}

void PcaCodec::row_dots(const uint8_t* codes, int64_t n, float c0, float step, const int16_t* a,
                        float* out, bool scalar) const {
  const int64_t k = kept(), rb = row_bytes_;
  if (k == 0) {
    for (int64_t t = 0; t < n; ++t) out[t] = c0;
    return;
  }
#if defined(VQ_PCA_WIDE)
  if (!scalar && unit_pairs_) {  // two rows per 512-bit register
    const int64_t Z = static_cast<int64_t>(unit_win_.size());
    thread_local std::vector<int16_t> lv;
    lv.resize(static_cast<size_t>(32 * Z));
    fill_unit_levels(a, k, Z, lv.data());
    const UnitTables tab{unit_win_.data(), unit_idx_.data(), unit_ctl_.data(), unit_mask_.data(),
                         unit_whole_};
    unit_dots_any<1>(codes, n, rb, tab, Z, lv.data(), &step, &c0, out, 0);
    return;
  }
#endif
#if defined(__AVX2__) && defined(__FMA__)
  // A row at a time, eight components per step (group_codes: no gathers). Rows whose 16-byte
  // windows would read past the buffer go through a zero-padded copy.
  if (!scalar) {
    const int64_t G = static_cast<int64_t>(group_win_.size());
    thread_local std::vector<int32_t> w8;
    thread_local std::vector<uint8_t> pad;
    w8.assign(static_cast<size_t>(G * 8), 0);
    shifted_levels(a, k, score_shift_.data(), w8.data());
    const int64_t reach = group_win_[static_cast<size_t>(G - 1)] + 16;
    pad.assign(static_cast<size_t>(std::max(rb, reach)), 0);
    const GroupTables tab{group_win_.data(), group_shuf_.data(), group_shift_.data(),
                          group_mask_.data()};
    const Rows rows{codes, n, rb, reach, pad.data()};
    const auto levels = [&](int64_t g) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w8.data() + 8 * g));
    };
    // Four rows at a time (every window inside the buffer): each group's tables and levels
    // loaded once for the four, four independent chains instead of one.
    int64_t t = 0;
    for (; t + 4 <= n && (t + 3) * rb + reach <= n * rb; t += 4) {
      const uint8_t* r0 = codes + t * rb;
      __m256i acc[4];
      for (auto& v : acc) v = _mm256_setzero_si256();
      for (int64_t g = 0; g < G; ++g) {
        const GroupRegs regs(tab, g);
        const __m256i lg = levels(g);
        for (int i = 0; i < 4; ++i)
          acc[i] = add_products(acc[i], window_codes(r0 + i * rb + tab.win[g], regs), lg);
      }
      for (int i = 0; i < 4; ++i)
        out[t + i] = std::fma(step, static_cast<float>(isum8(acc[i])), c0);
    }
    for (; t < n; ++t) {
      const uint8_t* row = rows.row(t);
      __m256i acc = _mm256_setzero_si256();
      for (int64_t g = 0; g < G; ++g) acc = add_products(acc, group_codes(row, tab, g), levels(g));
      out[t] = std::fma(step, static_cast<float>(isum8(acc)), c0);
    }
    return;
  }
#endif
  // The same sums in plain code: exact integers, so any order gives the same value.
  each_row_codes(
      codes, n, rb, bit_off_.data(), widths_.data(), k, [&](int64_t t, const float* code) {
        int32_t sum = 0;
        for (int64_t j = 0; j < k; ++j)
          sum += a[j] * (static_cast<int32_t>(code[j]) << score_shift_[static_cast<size_t>(j)]);
        out[t] = std::fma(step, static_cast<float>(sum), c0);
      });
}

void PcaCodec::dot_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* q,
                        float* out) const {
  if (n <= 0) return;
  const int64_t k = kept();
  thread_local std::vector<float> wj, mins, scales;
  thread_local std::vector<int16_t> levels;
  wj.resize(static_cast<size_t>(k));
  mins.resize(static_cast<size_t>(k));
  scales.resize(static_cast<size_t>(k));
  levels.resize(static_cast<size_t>(k));
  chunk_ranges(params, mins.data(), scales.data());
  const float c0 = chunk_query(q, 0, mins.data(), scales.data(), wj.data());
  const float step = score_weights(wj.data(), levels.data());
  row_dots(codes, n, c0, step, levels.data(), out, false);
}

void PcaCodec::dot_rows_lanes_ref(const uint8_t* params, const uint8_t* codes, int64_t n,
                                  const float* q, float* out) const {
  if (n <= 0) return;
  const size_t k = static_cast<size_t>(kept());
  std::vector<float> wj(k), mins(k), scales(k);
  std::vector<int16_t> levels(k);
  chunk_ranges(params, mins.data(), scales.data());
  const float c0 = chunk_query(q, 0, mins.data(), scales.data(), wj.data());
  const float step = score_weights(wj.data(), levels.data());
  row_dots(codes, n, c0, step, levels.data(), out, true);
}

void PcaCodec::code_sums(const uint8_t* codes, int64_t n, const float* w, float* lat,
                         bool scalar) const {
  const int64_t k = kept(), rb = row_bytes_;
  if (k == 0) return;
  const int64_t G = static_cast<int64_t>(group_win_.size());
#if defined(VQ_PCA_WIDE)
  if (!scalar && pair_groups_) {  // two groups per 512-bit register
    const int64_t P = (G + 1) / 2;
    thread_local std::vector<float> lat16;
    lat16.assign(static_cast<size_t>(P * 16), 0.0f);
    const WideTables tab{gpair_win_.data(), gpair_idx_.data(), group_shift_.data(),
                         group_mask_.data(), gpair_whole_};
    axpy_pair_runs<1>(codes, n, rb, w, 0, tab, P, lat16.data());
    std::copy_n(lat16.begin(), k, lat);
    return;
  }
#endif
#if defined(__AVX2__) && defined(__FMA__)
  // Eight components at a time, one lane per component (group_codes: no gathers), up to eight
  // groups' sums held in registers over all the rows, then the next eight. Rows whose 16-byte
  // windows would read past the buffer go through a zero-padded copy.
  if (!scalar) {
    thread_local std::vector<float> lat8;
    thread_local std::vector<uint8_t> pad;
    lat8.assign(static_cast<size_t>(G * 8), 0.0f);
    const int64_t reach = group_win_[static_cast<size_t>(G - 1)] + 16;
    pad.assign(static_cast<size_t>(std::max(rb, reach)), 0);
    const GroupTables tab{group_win_.data(), group_shuf_.data(), group_shift_.data(),
                          group_mask_.data()};
    const Rows rows{codes, n, rb, reach, pad.data()};
    using Fn = void (*)(const Rows&, const float*, const GroupTables&, int64_t, float*);
    constexpr Fn kRun[] = {axpy_groups<1>, axpy_groups<2>, axpy_groups<3>, axpy_groups<4>,
                           axpy_groups<5>, axpy_groups<6>, axpy_groups<7>, axpy_groups<8>};
    for (int64_t g0 = 0; g0 < G; g0 += 8)
      kRun[std::min<int64_t>(8, G - g0) - 1](rows, w, tab, g0, lat8.data());
    std::copy_n(lat8.begin(), k, lat);
    return;
  }
#endif
  each_row_codes(codes, n, rb, bit_off_.data(), widths_.data(), k,
                 [&](int64_t t, const float* code) {
                   for (int64_t j = 0; j < k; ++j) lat[j] = madd(w[t], code[j], lat[j]);
                 });
}

void PcaCodec::finish_latent(const uint8_t* params, const float* sums, float wsum,
                             float* out) const {
  thread_local std::vector<float> mins, scales;
  mins.resize(static_cast<size_t>(kept()));
  scales.resize(static_cast<size_t>(kept()));
  chunk_ranges(params, mins.data(), scales.data());
  finish_latent(mins.data(), scales.data(), sums, wsum, out);
}

void PcaCodec::finish_latent(const float* mins, const float* scales, const float* sums, float wsum,
                             float* out) const {
  const int64_t k = kept();
  for (int64_t j = 0; j < k; ++j) out[j] += madd(scales[j], sums[j], mins[j] * wsum);
  out[k] += wsum;
}

void PcaCodec::axpy_latent(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                           float* out) const {
  if (n <= 0) return;
  thread_local std::vector<float> sums;
  sums.assign(static_cast<size_t>(kept()), 0.0f);
  const float wsum = lane_sum16(w, n);
  code_sums(codes, n, w, sums.data(), false);
  finish_latent(params, sums.data(), wsum, out);
}

void PcaCodec::axpy_latent_ref(const uint8_t* params, const uint8_t* codes, int64_t n,
                               const float* w, float* out) const {
  if (n <= 0) return;
  std::vector<float> sums(static_cast<size_t>(kept()), 0.0f);
  const float wsum = lane_sum16(w, n);
  code_sums(codes, n, w, sums.data(), true);
  finish_latent(params, sums.data(), wsum, out);
}

namespace {

#if defined(__AVX2__) && defined(__FMA__)
// dot_rows for NQ queries: each group's codes unpacked once per row, then each query's
// levels multiplied in (w8 + 8 (q G + g): query q's levels of group g, 32-bit lanes).
template <int NQ>
void dot_groups_many(const Rows& rows, const GroupTables& tab, int64_t G, const int32_t* w8,
                     const float* step, const float* c0, float* out, int64_t out_stride) {
  for (int64_t t = 0; t < rows.n; ++t) {
    const uint8_t* row = rows.row(t);
    __m256i acc[NQ];
    for (int q = 0; q < NQ; ++q) acc[q] = _mm256_setzero_si256();
    for (int64_t g = 0; g < G; ++g) {
      const __m256i c = group_codes(row, tab, g);
      for (int q = 0; q < NQ; ++q)
        acc[q] = add_products(
            acc[q], c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w8 + 8 * (q * G + g))));
    }
    for (int q = 0; q < NQ; ++q)
      out[q * out_stride + t] = std::fma(step[q], static_cast<float>(isum8(acc[q])), c0[q]);
  }
}

// axpy_groups for NW weight rows over groups g0 .. g0 + NG - 1: per row, each group's codes
// unpacked once, then each weight row's accumulator of that group takes the multiply-add
// axpy_groups would (w + q * w_stride: weight row q; lat8 + 8 (q G + g): its sums).
template <int NW, int NG>
void axpy_groups_many(const Rows& rows, const float* w, int64_t w_stride, const GroupTables& tab,
                      int64_t G, int64_t g0, float* lat8) {
  __m256 acc[NW][NG];
  for (int q = 0; q < NW; ++q)
    for (int i = 0; i < NG; ++i) acc[q][i] = _mm256_loadu_ps(lat8 + 8 * (q * G + g0 + i));
  for (int64_t t = 0; t < rows.n; ++t) {
    const uint8_t* row = rows.row(t);
    __m256 wv[NW];
    for (int q = 0; q < NW; ++q) wv[q] = _mm256_set1_ps(w[q * w_stride + t]);
    for (int i = 0; i < NG; ++i) {
      const __m256 c = _mm256_cvtepi32_ps(group_codes(row, tab, g0 + i));
      for (int q = 0; q < NW; ++q) acc[q][i] = _mm256_fmadd_ps(wv[q], c, acc[q][i]);
    }
  }
  for (int q = 0; q < NW; ++q)
    for (int i = 0; i < NG; ++i) _mm256_storeu_ps(lat8 + 8 * (q * G + g0 + i), acc[q][i]);
}

// Groups g0 .. G - 1 in runs of at most NG (accumulators: NW x NG <= 12 of the 16 registers).
template <int NW>
void axpy_many_runs(const Rows& rows, const float* w, int64_t w_stride, const GroupTables& tab,
                    int64_t G, float* lat8) {
  constexpr int NG = NW >= 12 ? 1 : 12 / NW;
  int64_t g0 = 0;
  for (; g0 + NG <= G; g0 += NG) axpy_groups_many<NW, NG>(rows, w, w_stride, tab, G, g0, lat8);
  for (; g0 < G; ++g0) axpy_groups_many<NW, 1>(rows, w, w_stride, tab, G, g0, lat8);
}
// The kernels by batch size (index m = queries in the batch, 1 .. kMaxMany).
using DotManyFn = void (*)(const Rows&, const GroupTables&, int64_t, const int32_t*, const float*,
                           const float*, float*, int64_t);
constexpr DotManyFn kDotMany[] = {nullptr,
                                  dot_groups_many<1>,
                                  dot_groups_many<2>,
                                  dot_groups_many<3>,
                                  dot_groups_many<4>,
                                  dot_groups_many<5>,
                                  dot_groups_many<6>,
                                  dot_groups_many<7>,
                                  dot_groups_many<8>};
using AxpyManyFn = void (*)(const Rows&, const float*, int64_t, const GroupTables&, int64_t,
                            float*);
constexpr AxpyManyFn kAxpyMany[] = {nullptr,           axpy_many_runs<1>, axpy_many_runs<2>,
                                    axpy_many_runs<3>, axpy_many_runs<4>, axpy_many_runs<5>,
                                    axpy_many_runs<6>, axpy_many_runs<7>, axpy_many_runs<8>};
#endif

constexpr int64_t kMaxMany = 8;  // queries per batched call; more are split into batches

}  // namespace

void PcaCodec::dot_rows_many(const uint8_t* params, const uint8_t* codes, int64_t n,
                             const float* qs, int64_t nq, float* out, int64_t out_stride) const {
  const int64_t D = dim(), k = kept(), rb = row_bytes_;
#if defined(__AVX2__) && defined(__FMA__)
  if (n > 0 && k > 0 && nq >= 2) {
    const int64_t G = static_cast<int64_t>(group_win_.size());
    thread_local std::vector<float> mins, scales, wj, step, c0;
    thread_local std::vector<int16_t> a, lv;
    thread_local std::vector<int32_t> w8;
    thread_local std::vector<uint8_t> pad;
    mins.resize(static_cast<size_t>(k));
    scales.resize(static_cast<size_t>(k));
    wj.resize(static_cast<size_t>(k));
    a.resize(static_cast<size_t>(k));
    chunk_ranges(params, mins.data(), scales.data());
#if defined(VQ_PCA_WIDE)
    const bool wide = unit_pairs_;  // two rows per 512-bit register, the same bits
    const int64_t batch = wide ? kMaxWide : kMaxMany;
    const int64_t Z = static_cast<int64_t>(unit_win_.size());
#else
    constexpr bool wide = false;
    const int64_t batch = kMaxMany, Z = 0;
#endif
    for (int64_t j0 = 0; j0 < nq; j0 += batch) {
      const int64_t m = std::min(batch, nq - j0);
      step.resize(static_cast<size_t>(m));
      c0.resize(static_cast<size_t>(m));
      if (wide) {
        lv.resize(static_cast<size_t>(m * Z * 32));
      } else {
        w8.assign(static_cast<size_t>(m * G * 8), 0);
      }
      for (int64_t j = 0; j < m; ++j) {
        c0[static_cast<size_t>(j)] =
            chunk_query(qs + (j0 + j) * D, j0 + j, mins.data(), scales.data(), wj.data());
        step[static_cast<size_t>(j)] = score_weights(wj.data(), a.data());
#if defined(VQ_PCA_WIDE)
        if (wide) {
          fill_unit_levels(a.data(), k, Z, lv.data() + j * Z * 32);
          continue;
        }
#endif
        shifted_levels(a.data(), k, score_shift_.data(), w8.data() + j * G * 8);
      }
#if defined(VQ_PCA_WIDE)
      if (wide) {
        const UnitTables tab{unit_win_.data(), unit_idx_.data(), unit_ctl_.data(),
                             unit_mask_.data(), unit_whole_};
        kDotWide[m](codes, n, rb, tab, Z, lv.data(), step.data(), c0.data(), out + j0 * out_stride,
                    out_stride);
        continue;
      }
#endif
      const int64_t reach = group_win_[static_cast<size_t>(G - 1)] + 16;
      pad.assign(static_cast<size_t>(std::max(rb, reach)), 0);
      const GroupTables tab{group_win_.data(), group_shuf_.data(), group_shift_.data(),
                            group_mask_.data()};
      const Rows rows{codes, n, rb, reach, pad.data()};
      kDotMany[m](rows, tab, G, w8.data(), step.data(), c0.data(), out + j0 * out_stride,
                  out_stride);
    }
    return;
  }
#endif
  RowCodec::dot_rows_many(params, codes, n, qs, nq, out, out_stride);
}

void PcaCodec::axpy_latent_many(const uint8_t* params, const uint8_t* codes, int64_t n,
                                const float* w, int64_t w_stride, int64_t nw, float* lat,
                                int64_t lat_stride) const {
  const int64_t k = kept(), rb = row_bytes_;
#if defined(__AVX2__) && defined(__FMA__)
  if (n > 0 && k > 0 && nw >= 2) {
    const int64_t G = static_cast<int64_t>(group_win_.size());
    thread_local std::vector<float> mins, scales, lat8;
    thread_local std::vector<uint8_t> pad;
    mins.resize(static_cast<size_t>(k));
    scales.resize(static_cast<size_t>(k));
    chunk_ranges(params, mins.data(), scales.data());
    const int64_t reach = group_win_[static_cast<size_t>(G - 1)] + 16;
    const GroupTables tab{group_win_.data(), group_shuf_.data(), group_shift_.data(),
                          group_mask_.data()};
#if defined(VQ_PCA_WIDE)
    const bool wide = pair_groups_;
    const WideTables wt{gpair_win_.data(), gpair_idx_.data(), group_shift_.data(),
                        group_mask_.data(), gpair_whole_};
#else
    constexpr bool wide = false;
#endif
    if (!wide) pad.assign(static_cast<size_t>(std::max(rb, reach)), 0);
    const Rows rows{codes, n, rb, reach, pad.data()};
    for (int64_t j0 = 0; j0 < nw; j0 += kMaxMany) {
      const int64_t m = std::min(kMaxMany, nw - j0);
      const float* wj = w + j0 * w_stride;
      // wide: two groups per 512-bit register, pairs of groups, 16 sums each (component c at c)
      const int64_t per = wide ? (G + 1) / 2 * 16 : G * 8;
      lat8.assign(static_cast<size_t>(m * per), 0.0f);
#if defined(VQ_PCA_WIDE)
      if (wide)
        kAxpyWide[m](codes, n, rb, wj, w_stride, wt, (G + 1) / 2, lat8.data());
      else
#endif
        kAxpyMany[m](rows, wj, w_stride, tab, G, lat8.data());
      // As axpy_latent: the weights' sum (lane_sum16), then each component's affine map.
      for (int64_t j = 0; j < m; ++j) {
        const float* wr = wj + j * w_stride;
        finish_latent(mins.data(), scales.data(), lat8.data() + j * per, lane_sum16(wr, n),
                      lat + (j0 + j) * lat_stride);
      }
    }
    return;
  }
#endif
  RowCodec::axpy_latent_many(params, codes, n, w, w_stride, nw, lat, lat_stride);
}

void PcaCodec::unproject_latent(const float* lat, float* acc) const {
  const int64_t D = dim(), k = kept();
  for (int64_t d = 0; d < D; ++d) acc[d] = madd(lat[k], mean_[d], acc[d]);
  for (int64_t j = 0; j < k; ++j) {
    const float a = lat[j];
    const float* bj = basis_rows_[static_cast<size_t>(j)];
    for (int64_t d = 0; d < D; ++d) acc[d] = madd(a, bj[d], acc[d]);
  }
}

void PcaCodec::axpy_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                         float* acc) const {
  if (n <= 0) return;
  thread_local std::vector<float> lat;
  lat.assign(static_cast<size_t>(kept() + 1), 0.0f);
  axpy_latent(params, codes, n, w, lat.data());
  unproject_latent(lat.data(), acc);
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

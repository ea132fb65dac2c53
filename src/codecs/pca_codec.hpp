// Resident form of the PCA family (kvtc, uniform, svdq_split, palu, spectralquant, svdq's keys).
//
// The model is fitted by the method's own transform coder (PcaRowCoder or FixedRulePcaCoder) on
// the stream's first fit_rows() rows, and read back from the section header that coder writes,
// so mean, basis and bit widths are exactly those of the existing cache. A chunk of n rows is
// then projected with the same Eigen product and quantized with the same affine quantizer, so
// its codes and (min, scale) are bit-identical to what PcaRowCoder::encode_chunk Huffman-codes.
//
// Layout (k = kept components, b_j their widths in [1, 8], component order = descending variance):
//   chunk params: k x (f32 min, f32 scale) = 8k bytes; none with kvtc quant=calibrated (the
//                 calibration's fixed range per component and width is used instead);
//   row:          the k codes, component order, packed LSB-first at b_j bits each:
//                 ceil(sum_j b_j / 8) bytes (0 when every component is dropped: the row decodes
//                 to the mean).
// A row decodes on its own: latent_j = min_j + code_j * scale_j, then
// x = mean + sum_j latent_j * basis_j, summed from 0 in component order with one fused
// multiply-add per term, the mean added last. decode() runs a chunk through the storage decoder's
// own steps (coding::dequantize_affine, coding::unproject_rows), so the resident and the storage
// form decode to the same floats, bit for bit.
//
// Storage form: stored_chunk_bytes() is the size of the chunk PcaRowCoder::encode_chunk writes
// for the same codes (varint n, params, one Huffman / range-coded stream per width), and
// stored_header_bytes() the size of its section header (format, widths, mean, kept basis).
#pragma once

#include <memory>
#include <vector>

#include "store/row_codec.hpp"
#include "transform/family_coders.hpp"
#include "transform/pca_coder.hpp"
#include "veloxquant/calibration.hpp"

namespace vq::codecs {

/// Chunking of a PCA stream (as TransformSettings resolves it today).
struct PcaGeometry {
  int64_t chunk = 128, fit = 0, recent = 0, sink = 0;
  bool pre_rope = false;
};

class PcaCodec final : public store::RowCodec {
 public:
  /// `fitter` fits the model and writes the section header (a PcaRowCoder or a
  /// FixedRulePcaCoder); `reader` settings parse it back (they carry the calibration, if any)
  /// and give the entropy policy of the storage form. A fitter whose model is given (a
  /// calibration) is fitted at once: fit_rows() is then 0.
  PcaCodec(int64_t dim, std::unique_ptr<transform::RowCoder> fitter, transform::PcaSettings reader,
           transform::StreamId id, PcaGeometry g);

  int64_t chunk_rows() const override { return g_.chunk; }
  int64_t recent_rows() const override { return g_.recent; }
  int64_t sink_rows() const override { return g_.sink; }
  int64_t fit_rows() const override { return given_model_ ? 0 : g_.fit; }
  void fit(const float* rows, int64_t n) override;
  bool fitted() const override { return fitted_; }

  int64_t row_bytes() const override { return row_bytes_; }
  int64_t chunk_param_bytes(int64_t) const override { return fixed_ranges_ ? 0 : 8 * kept(); }
  void encode(const float* rows, int64_t n, uint8_t* params, uint8_t* codes) override;
  void decode(const uint8_t* params, const uint8_t* codes, int64_t n, float* out) const override;
  /// In the latent space: the query is projected on the kept components once (q'_j = basis_j . q,
  /// reused while the same query comes back, per thread), then each row costs k integer
  /// multiply-adds on its codes: row . q = mean . q + sum_j (min_j + code_j scale_j) q'_j, with
  /// the chunk's weights scale_j q'_j rounded to 16-bit levels (the codes moved up to 8 bits, so
  /// every component gets the same relative precision: an error of at most half a level per
  /// unit of shifted code, under 255 k step / 2 with step = max_j |scale_j q'_j 2^(b_j - 8)| /
  /// 32767) and summed exactly, so every path gives the same bits in any order.
  void dot_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* q,
                float* out) const override;
  /// Weighted codes summed per component (k per row), then un-projected once per call:
  /// acc += (sum w) mean + sum_j (min_j sum w + scale_j sum_t w_t code_tj) basis_j.
  void axpy_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                 float* acc) const override;
  /// The latent sum: k + 1 floats, lat_j += min_j sum w + scale_j sum_t w_t code_tj and
  /// lat_k += sum w; unproject_latent adds lat_k mean + sum_j lat_j basis_j (axpy_rows is the
  /// two on one chunk).
  int64_t latent_dim() const override { return kept() + 1; }
  void axpy_latent(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                   float* lat) const override;
  void unproject_latent(const float* lat, float* acc) const override;
  /// Several queries (weight rows) at once: each row's codes are unpacked once for all of them;
  /// every query gets the same operations, in the same order, as dot_rows (axpy_latent) alone.
  void dot_rows_many(const uint8_t* params, const uint8_t* codes, int64_t n, const float* qs,
                     int64_t nq, float* out, int64_t out_stride) const override;
  void axpy_latent_many(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                        int64_t w_stride, int64_t nw, float* lat,
                        int64_t lat_stride) const override;
  /// The latent kernels' arithmetic in plain scalar code, the yardstick the vector paths (AVX2,
  /// and the 512-bit ones where the target has AVX-512 VBMI) equal bit for bit.
  /// dot_rows_lanes_ref: per row the exact integer sum_j level_j (code_j << shift_j), then one
  /// fused multiply-add: c0 + step * sum (score_weights gives the levels and step).
  /// axpy_latent_ref: lat_j += w_t code_tj, rows in order, then each component's affine map.
  void dot_rows_lanes_ref(const uint8_t* params, const uint8_t* codes, int64_t n, const float* q,
                          float* out) const;
  void axpy_latent_ref(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                       float* lat) const;
  /// Reference twins: decode the rows, then the fp32 product (what dot_rows / axpy_rows equal up
  /// to rounding).
  void dot_rows_ref(const uint8_t* params, const uint8_t* codes, int64_t n, const float* q,
                    float* out) const {
    RowCodec::dot_rows(params, codes, n, q, out);
  }
  void axpy_rows_ref(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                     float* acc) const {
    RowCodec::axpy_rows(params, codes, n, w, acc);
  }

  bool wants_pre_rope() const override { return g_.pre_rope; }
  /// The model (own mean and basis, or pointers into a calibration), widths, fixed ranges and
  /// the latent kernels' unpack tables: all that this stream holds besides its chunks.
  int64_t state_bytes() const override;
  /// The unpack tables alone (part of state_bytes): O(kept components), about 0.2 KB per group
  /// of eight kept components where the 512-bit kernels run, half that elsewhere.
  int64_t unpack_table_bytes() const;
  int64_t external_bytes() const override { return external_bytes_; }
  int64_t external_entry() const override { return external_entry_; }
  int64_t stored_chunk_bytes(const uint8_t* params, const uint8_t* codes, int64_t n) const override;
  int64_t stored_header_bytes() const override { return header_bytes_; }

  int64_t kept() const { return static_cast<int64_t>(widths_.size()); }
  /// Kept components' widths, component order.
  const std::vector<uint8_t>& widths() const { return widths_; }

 private:
  void take_model(const std::vector<uint8_t>& header);
  /// The shuffle-unpack tables (group_*) from bit_off_ and widths_.
  void build_groups();
  /// The scores' 512-bit unit tables (unit_*) from bit_off_ and widths_.
  void build_units();
  /// This chunk's dequantizer: mins[j], scales[j].
  void chunk_ranges(const uint8_t* params, float* mins, float* scales) const;
  /// A query against one chunk: returns c0 = mean . q + sum_j min_j (basis_j . q) and fills
  /// w[j] = scale_j (basis_j . q); the projections are memoized per thread in memo slot `slot`.
  float chunk_query(const float* q, int64_t slot, const float* mins, const float* scales,
                    float* w) const;
  /// A query's weights w[0, k) as integer levels: a[j] = round(w[j] 2^-shift_j / step),
  /// |a[j]| <= score_levels_, step = max_j |w[j] 2^-shift_j| / score_levels_ (returned; NaN when
  /// a weight is not finite, 0 when every weight is 0).
  float score_weights(const float* w, int16_t* a) const;
  /// out[t] = fma(step, sum_j a[j] (code_tj << shift_j), c0), the sum exact in 32-bit integers
  /// (scalar: in plain code).
  void row_dots(const uint8_t* codes, int64_t n, float c0, float step, const int16_t* a, float* out,
                bool scalar) const;
  /// lat[j] += sum_t w_t code_tj, rows in order (scalar: in plain code).
  void code_sums(const uint8_t* codes, int64_t n, const float* w, float* lat, bool scalar) const;
  /// out[j] += scale_j sums[j] + min_j wsum (j < k), out[k] += wsum; the chunk's ranges read
  /// from params, or given.
  void finish_latent(const uint8_t* params, const float* sums, float wsum, float* out) const;
  void finish_latent(const float* mins, const float* scales, const float* sums, float wsum,
                     float* out) const;

  std::unique_ptr<transform::RowCoder> fitter_;  // released after fit
  transform::PcaSettings reader_;
  transform::StreamId id_;
  PcaGeometry g_;
  bool given_model_ = false, fitted_ = false, fixed_ranges_ = false;
  uint64_t model_id_ = 0;  // unique per fitted model in this process (keys the query memo)
  int64_t row_bytes_ = 0, header_bytes_ = 0, external_bytes_ = 0, external_entry_ = -1;
  std::vector<uint8_t> widths_;    // [k]
  std::vector<uint32_t> bit_off_;  // [k] first bit of code j in a row
  // The codes in groups of 8 components, for the shuffle unpack of the latent kernels: group g's
  // codes lie in the 16 bytes of a row from byte group_win_[g]; a byte shuffle puts code j's two
  // bytes in 32-bit lane j, then a shift and a mask (padding lanes: mask 0). Where the 512-bit
  // kernels run, the shift and mask tables hold an even number of groups.
  std::vector<int32_t> group_win_;    // [G]
  std::vector<uint8_t> group_shuf_;   // [G * 32] byte shuffle control (per 128-bit half)
  std::vector<int32_t> group_shift_;  // [G * 8], or [2 ceil(G / 2) * 8]
  std::vector<int32_t> group_mask_;   // likewise
  // The value sums' unpack in 16 lanes (the 512-bit kernels; built only where the target has
  // AVX-512 VBMI): a 64-byte load from the window, a byte permutation, then group_shift_ /
  // group_mask_; two groups per register: lanes 0-7 group 2p, lanes 8-15 group 2p + 1 of one
  // row, both read from group 2p's window (gpair_win_). gpair_whole_: the row fits 64 bytes
  // (rb < 64) and is read once for every pair (the pair's offset is then in its permutation).
  //   pair_groups_: G >= 2 (one group keeps the eight-lane value sums; no gpair tables).
  // The scores' integer form (every path): code j moved up to 8 bits, code_j << shift_j with
  // shift_j = 8 - b_j, against a level per component: level_j = round(w_j 2^-shift_j / step),
  // step = max_j |w_j 2^-shift_j| / score_levels_ (w_j = scale_j q'_j), so that every
  // component's weight is as fine, relative to what its codes can add, as the largest one's, and
  // sum_j |level_j| (code_j << shift_j) <= score_levels_ 255 k < 2^31.
  // The scores' unpack (512-bit kernels): units of four components (codes 4u .. 4u + 3), each the
  // four 16-bit lanes of one 64-bit lane. A register holds units 4z .. 4z + 3 of row t (low
  // half) and of row t + 1: a byte permutation of a 64-byte window puts each unit's 8 bytes
  // from its first code's byte in its 64-bit lane, a multishift takes each code's byte from its
  // bit offset - shift_j, a mask keeps the code's bits. The window is the row pair (unit_whole_,
  // 2 rb <= 64) or starts at unit 4z's byte of row t; unit_pairs_: every register's bytes fit
  // its window. state_bytes counts these tables with the rest.
  bool pair_groups_ = false, gpair_whole_ = false, unit_pairs_ = false, unit_whole_ = false;
  std::vector<int32_t> unit_win_;   // [Z], Z = ceil(k / 16) (empty unless unit_pairs_)
  std::vector<uint8_t> unit_idx_;   // [Z * 32] byte permutation of row t's half (+ rb: t + 1's)
  std::vector<uint8_t> unit_ctl_;   // [Z * 32] multishift control (one half; both use it)
  std::vector<uint8_t> unit_mask_;  // [Z * 32] code masks (the high byte of each lane is 0)
  int32_t score_levels_ = 32767;
  std::vector<uint8_t> score_shift_;                // [k] 8 - b_j
  std::vector<float> score_unshift_;                // [k] 2^-shift_j
  std::vector<int32_t> gpair_win_;                  // [P], P = ceil(G / 2)
  std::vector<uint8_t> gpair_idx_;                  // [P * 64]
  std::vector<float> own_mean_, own_basis_;         // local model: [D], [k, D]
  const float* mean_ = nullptr;                     // own_mean_ or the calibration's
  std::vector<const float*> basis_rows_;            // [k] rows of own_basis_ or the calibration's
  std::vector<coding::AffineParams> fixed_;         // [k] quant=calibrated ranges
  std::shared_ptr<const Calibration> calibration_;  // keeps the referenced model alive
};

/// kvtc's codec for one stream (all of its options; basis=<path> loads the calibration).
std::unique_ptr<store::RowCodec> make_kvtc_row_codec(const CacheConfig& c,
                                                     const store::StreamInfo& s);
/// The codec of a set_pca_factories method (uniform, svdq_split).
std::unique_ptr<store::RowCodec> make_pca_row_codec(const CacheConfig& c,
                                                    const store::StreamInfo& s,
                                                    transform::AllocRule rule,
                                                    bool from_alloc_option);
/// The codec of a set_family_factories method (palu, spectralquant, svdq, gear): the method's
/// own coder for the stream decides (FixedRulePcaCoder -> PcaCodec, Fp16RowCoder -> a chunked
/// Fp16Codec with the same geometry, GearRowCoder -> GearCodec from the config).
store::RowCodecFactory family_row_codec_factory(transform::KvFactoryMaker maker);

}  // namespace vq::codecs

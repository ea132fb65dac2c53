// KVTC's transform coder for one stream of [n, D] rows (one head's keys or values):
// center, PCA (covariance + symmetric eigensolver in double, r = min(n, D) components),
// per-component variance, bit allocation (DP, water-filling, uniform or SVDq split), affine
// min/max quantization of the surviving components per chunk, and order-0 Huffman coding of the
// codes, one stream per bit width. decode_chunk is the exact inverse of the stored bytes.
//
// Section header (written once by fit):
//   u8     format = 1
//   varint D
//   varint k                 surviving components (bits > 0), k <= D
//   u8     bits[k]           each in [1, 8], component order (descending variance)
//   f32    mean[D]
//   f32    basis[k][D]       unit direction of each surviving component
// or, with a calibration (kvtc:basis=<path>; the basis lives in the shared .vqcal file):
//   u8     format = 2
//   varint D
//   u64    calibration id    XXH64 checksum of the .vqcal file; must match the loaded one
//   varint entry             index of the (layer, head, K/V) entry in the calibration
//   u8     quant             0 = per-chunk (min, scale); 1 = the calibration's fixed ranges
//   u8     bits[D]           every component's width in [0, 8], calibration component order
// Chunk:
//   varint n                 tokens in the chunk (>= 1)
//   f32    (min, scale)[k]   the affine quantizer of each surviving component over this chunk
//                            (absent when quant = 1: min = range_lo, scale = (hi - lo) / levels)
//   one entropy stream (coding/huffman.hpp) per bit width present, ascending width: the codes of
//   the components with that width, component order, each component's n codes in token order.
// Dropped (0-bit) components are not stored at all: the decoder reconstructs them as 0 latent.
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <memory>
#include <vector>

#include "coding/huffman.hpp"
#include "coding/quantizer.hpp"
#include "transform/row_coder.hpp"
#include "veloxquant/calibration.hpp"

namespace vq::transform {

enum class AllocRule : int { Dp = 0, Waterfill = 1, Uniform = 2, Split = 3 };
const char* alloc_rule_name(AllocRule r);

struct PcaSettings {
  AllocRule rule = AllocRule::Dp;
  int64_t bit_budget = 0;        ///< bits per token across components (resolved, >= 0)
  std::vector<int> bit_choices;  ///< normalized (sorted, unique, starts with 0); DP/waterfill only
  double beta = 3.5;             ///< distortion decay of the D(v, b) = v beta^-b model
  /// Entropy streams: Huffman family only, or also mode 4 (one adaptive model per component).
  coding::EntropyPolicy entropy = coding::EntropyPolicy::Huffman;
  /// kvtc basis=<path>: the shared calibration (null = a local basis fitted on the stream) and
  /// its id. With it, rule Dp allocates from the calibration's variances unless measured_alloc
  /// (alloc=dp_measured: the DP over its measured distortion table).
  std::shared_ptr<const Calibration> calibration;
  uint64_t calibration_id = 0;
  bool measured_alloc = false;
  /// quant=calibrated: each component's calibrated fixed range, no per-chunk parameters.
  bool quant_calibrated = false;
};

/// The frozen state of a fitted stream.
struct PcaModel {
  int64_t D = 0;
  std::vector<double> variances;  ///< [r] every component's variance, descending (not stored)
  std::vector<int> bits;          ///< [r] allocation of every component (not stored beyond kept)
  std::vector<float> mean;        ///< [D]
  std::vector<float> basis;       ///< [k, D] surviving directions, component order
  std::vector<int> kept_bits;     ///< [k] their widths (1..8)
  int64_t kept() const { return static_cast<int64_t>(kept_bits.size()); }
};

/// Fit on rows X [n, D] (n >= 1).
PcaModel fit_pca_model(const float* X, int64_t n, int64_t D, const PcaSettings& s);

/// Allocation of `rule` for the given variances (all of them; the result has the same length).
std::vector<int> allocate_bits(const std::vector<double>& variances, const PcaSettings& s);

class PcaRowCoder final : public RowCoder {
 public:
  /// Encoder/decoder for head dimension D. A decoder only needs D (settings unused), plus the
  /// calibration when the stored header references one. `id` picks the calibration entry.
  PcaRowCoder(int64_t D, PcaSettings settings, StreamId id = {});

  bool needs_fit() const override { return true; }
  bool fit_uses_rows() const override { return settings_.calibration == nullptr; }
  int64_t external_bytes() const override;
  int64_t external_entry() const override { return calibrated_ ? external_entry_ : -1; }
  void fit(const float* rows, int64_t n, EncodedSection& sec) override;
  void read_header(coding::ByteReader& in) override;
  void encode_chunk(const float* rows, int64_t n, EncodedSection& sec) override;
  int64_t decode_chunk(coding::ByteReader& in, int64_t max_rows, float* rows) override;

  bool fitted() const { return fitted_; }
  const PcaModel& model() const { return model_; }

 private:
  void set_model(PcaModel m);
  /// Model of calibration entry `entry` with widths bits[D]; fills fixed_params_ when `fixed`.
  PcaModel calibrated_model(const CalibrationEntry& e, const std::vector<int>& bits, bool fixed);
  void ensure_scratch(int64_t n, bool centered_rows);

  using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  struct Group {
    int width = 0;
    int64_t first = 0;  // index into order_
    int64_t count = 0;
  };

  PcaSettings settings_;
  StreamId id_;
  PcaModel model_;
  bool fitted_ = false;
  bool calibrated_ = false;      // the model comes from a calibration entry (header format 2)
  bool fixed_ranges_ = false;    // chunks carry no params (quant=calibrated)
  int64_t external_entry_ = -1;  // calibration entry index when calibrated_
  std::vector<coding::AffineParams> fixed_params_;  // [k] when fixed_ranges_
  std::vector<int64_t> order_;                      // kept components sorted by (width, index)
  std::vector<int64_t> slot_;  // slot_[j]: position of kept component j in order_
  std::vector<Group> groups_;

  // scratch, grown to the largest chunk seen
  std::vector<float> xc_;       // [n, D] centered rows
  std::vector<float> lat_;      // [k, n] latents
  std::vector<uint8_t> codes_;  // [k, n] codes, in order_ order
  std::vector<coding::AffineParams> params_;
  std::vector<float> mp_;       // a chunk's stored (min, scale) pairs
  std::vector<float> basis_t_;  // [D, k] the kept basis transposed (project_rows' form)
  std::vector<float> latT_;     // [n, k] a chunk's latents row-major
  coding::HuffmanEncoder enc_;
  coding::HuffmanDecoder dec_;
  std::vector<coding::HuffmanDecoder::StreamSpec> streams_;  // decode_chunk's streams
};

}  // namespace vq::transform

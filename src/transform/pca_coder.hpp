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
// Chunk:
//   varint n                 tokens in the chunk (>= 1)
//   f32    (min, scale)[k]   the affine quantizer of each surviving component over this chunk
//   one entropy stream (coding/huffman.hpp) per bit width present, ascending width: the codes of
//   the components with that width, component order, each component's n codes in token order.
// Dropped (0-bit) components are not stored at all: the decoder reconstructs them as 0 latent.
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "coding/huffman.hpp"
#include "coding/quantizer.hpp"
#include "transform/row_coder.hpp"

namespace vq::transform {

enum class AllocRule : int { Dp = 0, Waterfill = 1, Uniform = 2, Split = 3 };
const char* alloc_rule_name(AllocRule r);

struct PcaSettings {
  AllocRule rule = AllocRule::Dp;
  int64_t bit_budget = 0;        ///< bits per token across components (resolved, >= 0)
  std::vector<int> bit_choices;  ///< normalized (sorted, unique, starts with 0); DP/waterfill only
  double beta = 3.5;             ///< distortion decay of the D(v, b) = v beta^-b model
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
  /// Encoder/decoder for head dimension D. A decoder only needs D (settings unused).
  PcaRowCoder(int64_t D, PcaSettings settings);

  bool needs_fit() const override { return true; }
  void fit(const float* rows, int64_t n, EncodedSection& sec) override;
  void read_header(coding::ByteReader& in) override;
  void encode_chunk(const float* rows, int64_t n, EncodedSection& sec) override;
  int64_t decode_chunk(coding::ByteReader& in, int64_t max_rows, float* rows) override;

  bool fitted() const { return fitted_; }
  const PcaModel& model() const { return model_; }

 private:
  void set_model(PcaModel m);
  void ensure_scratch(int64_t n, bool centered_rows);

  using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  struct Group {
    int width = 0;
    int64_t first = 0;  // index into order_
    int64_t count = 0;
  };

  PcaSettings settings_;
  PcaModel model_;
  bool fitted_ = false;
  std::vector<int64_t> order_;  // kept components sorted by (width, index)
  std::vector<int64_t> slot_;   // slot_[j]: position of kept component j in order_
  std::vector<Group> groups_;

  // scratch, grown to the largest chunk seen
  std::vector<float> xc_;       // [n, D] centered rows
  std::vector<float> lat_;      // [k, n] latents
  std::vector<uint8_t> codes_;  // [k, n] codes, in order_ order
  std::vector<coding::AffineParams> params_;
  coding::HuffmanEncoder enc_;
  coding::HuffmanDecoder dec_;
};

}  // namespace vq::transform

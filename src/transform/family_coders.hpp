// Row coders and registry helpers of the published transform baselines (issue 7): svdq, palu,
// spectralquant and gear (resident through the store, storage through TransformBlockCodec), plus
// the KIVI quantizer used by kivi.cpp.
//
// The PCA baselines (svdq, palu, spectralquant) differ from kvtc only in how bits are allocated
// over the principal components, so FixedRulePcaCoder fits kvtc's PCA, applies the method's rule
// to the component variances, and writes exactly kvtc's section format (pca_coder.hpp): decoding,
// chunking, quantization, Huffman coding and byte accounting are kvtc's own code.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "coding/huffman.hpp"
#include "transform/pca_coder.hpp"
#include "transform/transform_cache.hpp"
#include "veloxquant/registry.hpp"

namespace vq::transform {

/// Bits per PCA component from the component variances (descending, length r <= D).
using BitRule = std::function<std::vector<int>(const std::vector<double>& variances, int64_t D)>;

/// kvtc's PCA pipeline with an externally supplied allocation rule.
class FixedRulePcaCoder final : public RowCoder {
 public:
  FixedRulePcaCoder(int64_t D, BitRule rule);
  bool needs_fit() const override { return true; }
  void fit(const float* rows, int64_t n, EncodedSection& sec) override;
  void read_header(coding::ByteReader& in) override { inner_.read_header(in); }
  void encode_chunk(const float* rows, int64_t n, EncodedSection& sec) override {
    inner_.encode_chunk(rows, n, sec);
  }
  int64_t decode_chunk(coding::ByteReader& in, int64_t max_rows, float* rows) override {
    return inner_.decode_chunk(in, max_rows, rows);
  }
  /// Every component's width after fit (length r, component order); empty before.
  const std::vector<int>& bits() const { return bits_; }
  /// Every component's variance after fit.
  const std::vector<double>& variances() const { return variances_; }

 private:
  BitRule rule_;
  PcaRowCoder inner_;
  std::vector<int> bits_;
  std::vector<double> variances_;
};

/// Rows stored verbatim at fp16. Chunk: varint n, then n * W little-endian fp16 values (payload).
class Fp16RowCoder final : public RowCoder {
 public:
  explicit Fp16RowCoder(int64_t W) : RowCoder(W) {}
  bool needs_fit() const override { return false; }
  void fit(const float*, int64_t, EncodedSection&) override {}
  void read_header(coding::ByteReader&) override {}
  void encode_chunk(const float* rows, int64_t n, EncodedSection& sec) override;
  int64_t decode_chunk(coding::ByteReader& in, int64_t max_rows, float* rows) override;
};

/// GEAR: per chunk, the `ratio` largest-magnitude entries are kept as sparse fp16 outliers, the
/// rest (outliers zeroed) is quantized per token at `bits` bits (affine min/max), and the
/// quantization residual is approximated by its best rank-`rank` factorization A B (fp16).
/// Header: u8 format = 1, u8 bits. It has nothing to fit, but "fits" (writes the header) like
/// kvtc so that a cache encodes its first fit_tokens tokens at once, as kvtc does.
/// Chunk: varint n; varint m; m x (varint index delta, fp16 value); (f32 min, f32 scale)[n];
/// one Huffman stream of the n * W codes; varint k; fp16 A[n, k]; fp16 B[k, W].
class GearRowCoder final : public RowCoder {
 public:
  GearRowCoder(int64_t W, int bits, int64_t rank, double ratio);
  bool needs_fit() const override { return true; }
  void fit(const float*, int64_t, EncodedSection& sec) override;
  void read_header(coding::ByteReader& in) override;
  void encode_chunk(const float* rows, int64_t n, EncodedSection& sec) override;
  int64_t decode_chunk(coding::ByteReader& in, int64_t max_rows, float* rows) override;

 private:
  int bits_;
  int64_t rank_;
  double ratio_;
  coding::HuffmanEncoder enc_;
  coding::HuffmanDecoder dec_;
};

/// KIVI's asymmetric quantization of one group of tokens. keys: each channel is quantized over
/// the chunk's tokens (per-channel); values: each token is quantized in groups of `group`
/// channels (per-token). Chunk: varint n; (f32 min, f32 scale) per quantization group (keys: W,
/// values: n * ceil(W / group), token-major); one Huffman stream of the n * W codes.
class KiviRowCoder final : public RowCoder {
 public:
  KiviRowCoder(int64_t W, bool keys, int bits, int64_t group);
  bool needs_fit() const override { return false; }
  void fit(const float*, int64_t, EncodedSection&) override {}
  void read_header(coding::ByteReader&) override {}
  void encode_chunk(const float* rows, int64_t n, EncodedSection& sec) override;
  int64_t decode_chunk(coding::ByteReader& in, int64_t max_rows, float* rows) override;

 private:
  bool keys_;
  int bits_;
  int64_t group_;
  std::vector<uint8_t> codes_;
  coding::HuffmanEncoder enc_;
  coding::HuffmanDecoder dec_;
};

// ----- allocation rules (exposed for the tests) -----

/// svdq: the D component slots are cut into G = schedule.size() equal groups; component j gets
/// schedule[j * G / D]. Components past r (rank-deficient fits) do not exist.
std::vector<int> svdq_schedule_bits(int64_t r, int64_t D, const std::vector<int>& schedule);
/// palu: the first `rank` components (0 = all r) are kept; the top max(1, kept / 4) get hi bits,
/// the other kept ones lo; components past rank get 0.
std::vector<int> palu_bits(int64_t r, int64_t rank, int hi, int lo);
/// Participation ratio (sum v)^2 / sum v^2 of the variances (0 for an all-zero spectrum).
double participation_ratio(const std::vector<double>& variances);
/// spectralquant: the first clamp(round(PR), 1, r) components ("signal") get signal_bits, the
/// rest noise_bits (r = 0 gives an empty vector; an all-zero spectrum counts as 1 signal).
std::vector<int> spectral_bits(const std::vector<double>& variances, int signal_bits,
                               int noise_bits);
int64_t spectral_split(const std::vector<double>& variances);

// ----- registry helpers -----

/// A coder for one stream of width W; kv: 0 = keys, 1 = values.
using KvCoderFactory = std::function<std::unique_ptr<RowCoder>(int64_t width, int kv)>;
using KvFactoryMaker = std::function<KvCoderFactory(const CacheConfig&, int64_t head_dim)>;

/// chunk_tokens and fit_tokens (as for kvtc).
std::vector<OptionSpec> chunk_options();
/// `kind` (k|v): which tensor a BlockCodec's blocks hold, for methods that code K and V apart.
OptionSpec kind_option();

/// Fills family, make_row_codec (the resident codec, through codecs::family_row_codec_factory)
/// and make_codec (the storage form: a TransformBlockCodec, whose
/// stream kind comes from the `kind` option when the method has one, else keys).
void set_family_factories(MethodInfo& m, KvFactoryMaker maker);

}  // namespace vq::transform

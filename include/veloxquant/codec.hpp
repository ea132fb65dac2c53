// Stateless block codecs of the transform family (kvtc, uniform, svdq_split, q8_0, q4_0, ...).
//
// A codec turns one layer's keys OR values, x [H, S, D] fp32 row-major (H KV heads, S tokens,
// D = head_dim), into an EncodedBlock: a list of byte sections, and back. It holds no state
// between calls: encode fits whatever the method fits (a PCA basis, a bit allocation) on x itself.
// The same input always gives the same bytes.
//
// Sections are the unit a container (the .vqkv file format) stores:
//   - per-head methods (every registered one: kvtc, uniform, q8_0, ...) write H sections,
//     section h holding head h;
//   - heads_coupled codecs write one section with head = -1 holding every head (only the reader
//     of .vqkv version-1 q8_0 / q4_0 files, whose blocks spanned a token's row of all heads).
// A section's bytes are self-contained given the block's (H, S, D) and the codec's config: the
// container stores those, the method spec string (config().to_string()) and the section bytes.
// Byte layouts are documented in docs/kvtc.md.
//
// decode() trusts nothing: every count and size inside the bytes is checked against (H, S, D) and
// against the bytes actually present; malformed, truncated or trailing bytes throw vq::FormatError
// (never a crash, never a read out of bounds).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "veloxquant/config.hpp"
#include "veloxquant/tensor.hpp"

namespace vq {

/// Where the bytes of a section (or of a cache) go. Every stored byte is in exactly one field,
/// so total() equals the stored size.
struct ByteBreakdown {
  int64_t basis = 0;    ///< PCA mean and basis directions (fp32)
  int64_t params = 0;   ///< headers, bit allocation, chunk token counts, quantizer min/scale,
                        ///< ggml block scales
  int64_t payload = 0;  ///< quantized codes as stored (entropy-coded or fixed width)
  int64_t table = 0;    ///< entropy-coder stream headers and code tables
  int64_t raw = 0;      ///< tokens stored uncompressed at fp16 (the cache's raw window)
  int64_t total() const { return basis + params + payload + table + raw; }
  ByteBreakdown& operator+=(const ByteBreakdown& o) {
    basis += o.basis;
    params += o.params;
    payload += o.payload;
    table += o.table;
    raw += o.raw;
    return *this;
  }
};

/// One self-contained piece of an encoded block.
struct EncodedSection {
  int64_t head = -1;           ///< KV head held by this section; -1 = all heads
  std::vector<uint8_t> bytes;  ///< the stored bytes
  ByteBreakdown breakdown;     ///< breakdown.total() == bytes.size()
  /// What payload + table would cost with every code packed at its fixed bit width (no entropy
  /// coding, no tables): the "pre-entropy" payload size.
  int64_t fixed_width_payload = 0;
  /// The whole section at fixed width: bytes.size() - payload - table + fixed_width_payload.
  int64_t pre_entropy_bytes() const {
    return breakdown.total() - breakdown.payload - breakdown.table + fixed_width_payload;
  }
};

/// One layer's K or V tensor [H, S, D], encoded.
struct EncodedBlock {
  int64_t H = 0, S = 0, D = 0;
  std::vector<EncodedSection> sections;
  int64_t total_bytes() const;
  ByteBreakdown breakdown() const;
  int64_t pre_entropy_bytes() const;
};

class BlockCodec {
 public:
  virtual ~BlockCodec() = default;

  /// The method id ("kvtc", "q8_0", ...).
  const std::string& method() const { return config_.method(); }
  /// The full configuration; CacheConfig::parse(config().to_string()) re-creates this codec.
  const CacheConfig& config() const { return config_; }
  /// D: every block must have this head dimension.
  int64_t head_dim() const { return head_dim_; }
  /// True when one section holds every head (head = -1), false for one section per head.
  virtual bool heads_coupled() const = 0;

  /// Encode x [H, S, D] (row-major, finite values; H >= 1, S >= 0). Throws InvalidArgument for
  /// bad shapes or NaN/Inf.
  virtual EncodedBlock encode(const float* x, int64_t H, int64_t S) const = 0;
  /// Encode a tensor [1, H, S, D].
  EncodedBlock encode(const Tensor& x) const;

  /// Decode into out [H, S, D] (block.H * block.S * D floats). Throws FormatError when the block
  /// or any section is malformed (wrong head layout, sizes, counts, truncated or extra bytes).
  virtual void decode(const EncodedBlock& block, float* out) const = 0;
  /// Decode into a new tensor [1, H, S, D].
  Tensor decode(const EncodedBlock& block) const;

 protected:
  BlockCodec(CacheConfig config, int64_t head_dim);
  /// Checks shared by every decoder: block.D == head_dim, H >= 1, S >= 0, sizes fit in memory,
  /// and the section/head layout (0..H-1 in order, or a single -1 section when coupled).
  void check_block_layout(const EncodedBlock& block) const;

 private:
  CacheConfig config_;
  int64_t head_dim_;
};

/// The codec of a transform-family method (throws InvalidArgument for methods without one).
std::unique_ptr<BlockCodec> make_codec(const CacheConfig& config, int64_t head_dim);
std::unique_ptr<BlockCodec> make_codec(const std::string& spec, int64_t head_dim);

}  // namespace vq

// The per-stream coder interface shared by the transform family's caches and block codecs.
//
// A stream is a sequence of rows of width W (one head's keys or values: W = D; or, for
// heads-coupled formats, a token's row across all heads: W = H * D). Its stored form is one
// section (include/veloxquant/codec.hpp): a header written once by fit() (empty for formats with
// nothing to fit), then chunks, each written by one encode_chunk() call. A decoder rebuilds the
// coder state from the header with read_header() and then reads the chunks in order.
#pragma once

#include <cstdint>

#include "coding/byte_io.hpp"
#include "veloxquant/codec.hpp"

namespace vq::transform {

/// Which stream a coder is built for (a calibrated coder picks its basis with it).
struct StreamId {
  int64_t layer = 0;    ///< CacheContext::layer
  int64_t head = 0;     ///< KV head; -1 for a heads-coupled stream
  int kv = 0;           ///< 0 = keys, 1 = values
  int64_t n_heads = 0;  ///< H of the cache (0 = unknown, e.g. a block codec)
};

class RowCoder {
 public:
  explicit RowCoder(int64_t width) : width_(width) {}
  virtual ~RowCoder() = default;
  RowCoder(const RowCoder&) = delete;
  RowCoder& operator=(const RowCoder&) = delete;

  /// W: floats per row.
  int64_t width() const { return width_; }
  /// True when the coder fits state (a basis, an allocation) on its first rows.
  virtual bool needs_fit() const = 0;
  /// Fit on rows [n, W] (n >= 1) and append the section header to `sec` (with its byte breakdown).
  /// Called once, before any encode_chunk. A coder whose fit_uses_rows() is false (its model is
  /// given, e.g. a calibration file) ignores the rows and may be called with n = 0.
  virtual void fit(const float* rows, int64_t n, EncodedSection& sec) = 0;
  /// False when fit() only writes the header of a model the coder already holds: a cache then
  /// writes it at once and never waits for fit_tokens rows.
  virtual bool fit_uses_rows() const { return true; }
  /// Bytes of model state the decoder needs but the section does not store (a basis shared per
  /// model through a calibration file); reported, never counted in the stored size.
  virtual int64_t external_bytes() const { return 0; }
  /// Which shared model entry external_bytes() describes (-1 = none): streams that share one
  /// (batch rows, or heads of a shared-heads calibration) are counted once.
  virtual int64_t external_entry() const { return -1; }
  /// Decoder side: parse the header written by fit() and take the state it describes.
  /// Throws FormatError on malformed bytes.
  virtual void read_header(coding::ByteReader& in) = 0;
  /// Append one chunk holding rows [n, W] (n >= 1) to `sec`.
  virtual void encode_chunk(const float* rows, int64_t n, EncodedSection& sec) = 0;
  /// Read one chunk of at most max_rows rows (max_rows >= 1) into rows [.., W]; returns the rows
  /// it held. Throws FormatError on malformed bytes or non-finite output.
  virtual int64_t decode_chunk(coding::ByteReader& in, int64_t max_rows, float* rows) = 0;

 private:
  int64_t width_;
};

}  // namespace vq::transform

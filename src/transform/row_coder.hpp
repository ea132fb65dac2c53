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
  /// Called once, before any encode_chunk.
  virtual void fit(const float* rows, int64_t n, EncodedSection& sec) = 0;
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

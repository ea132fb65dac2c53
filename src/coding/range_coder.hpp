// Entropy stream mode 4: an adaptive multi-symbol range coder with one model per segment.
//
// Why adaptive rather than static rANS with per-segment tables: the segments here are short (one
// PCA component's codes over one chunk, 128 symbols by default) and the alphabets go up to 256
// symbols, so any frequency table written per segment would cost about as much as the symbols it
// describes. An adaptive model writes no table; what it pays instead is its learning cost. The
// model is the Krichevsky-Trofimov estimator (every count starts at 1/2, each observation adds 1;
// in integers: start at 1, add 2), and its learning cost is cut by starting each segment from a
// prior: the histogram of the segments already coded in the same stream (the other components of
// the same width, which after the per-component min/max quantizer have similar shapes), worth P
// pseudo-observations. A segment whose statistics differ from that prior overrides it after a few
// dozen symbols. Measured on the KV of stories260K and babyllama-char (kvtc, 2-4 bits per value,
// sum over all streams of the smaller of Huffman and mode 4): increments 2 / 8 / 32 gave
// 337651 / 339209 / 340812 bytes (Huffman alone 349441), and P = 0 / 4 / 16 / 64 with increment 2
// gave 339625 / 338801 / 337651 / 338993. Trying P in {0, 4, 16} per stream and keeping the best
// saved only 0.09% more for 3x the encoding time, so the encoder writes P = 16 (the format keeps
// P per stream, so a later encoder may choose).
//
// Stream layout (after the shared u8 mode = 4 and varint count of coding/huffman.hpp):
//   varint segment_length   L: symbols per segment, 1 <= L <= count, count % L == 0
//   u8     prior_weight     P <= kRangeMaxPrior: pseudo-observations the prior is worth
//   varint payload_bytes    then the range-coded payload
//
// The model of every segment, over the full alphabet A = 2^width, starts at
//   f[s] = 1 + floor(hist[s] * P * kRangeIncrement / hist_total)     (f[s] = 1 when P = 0 or
//                                                                      no segment precedes)
// where hist counts the symbols of all preceding segments of this stream. After coding symbol s,
// f[s] += kRangeIncrement (2); when the total exceeds kRangeMaxTotal every f becomes (f + 1) / 2.
//
// Range coder (integer only): a 32-bit range and a carry-propagating low, renormalized a byte at a
// time while range < 2^24. Coding s with total T: r = range / T, low += r * cum(s),
// range = r * f[s]. The stream starts with range = 2^32 - 1 and low = 0. At the end the encoder
// picks the value in [low, low + range) with the most trailing zero bits, writes its four bytes
// (most significant first) and then drops every trailing zero byte of the payload; the decoder
// reads zero bytes past the payload's end. So the payload never ends in a zero byte, and it is
// never longer than the bytes the decoder reads (4 to start + 1 per renormalization).
//
// The decoder refuses (vq::FormatError) a segment length of 0 or one that does not divide count,
// mode 4 with count 0, a prior weight above the limit, a payload longer than the bytes present, a
// code value that falls outside the model's cumulative range (no symbol of the alphabet there),
// a payload that ends in a zero byte, or one with bytes the decoding never reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "coding/byte_io.hpp"

namespace vq::coding {

/// The stream mode byte of this layout (StreamMode::Range in coding/huffman.hpp).
constexpr uint8_t kRangeStreamMode = 4;
/// Weight of one observed symbol in a model's counts.
constexpr uint32_t kRangeIncrement = 2;
/// A model's total count is kept at or below this (halving when it grows past it).
constexpr uint32_t kRangeMaxTotal = 1u << 16;
/// Largest prior weight a stream may declare.
constexpr int kRangeMaxPrior = 64;
/// The prior weight RangeStreamEncoder::encode writes.
constexpr int kRangeDefaultPrior = 16;

/// What one mode-4 stream cost, in bytes (the same split as StreamSizes).
struct RangeStreamSize {
  int64_t overhead = 0;  ///< mode, count, segment length, prior weight, payload size
  int64_t payload = 0;   ///< the range-coded bytes
  int64_t total() const { return overhead + payload; }
};

/// Reusable mode-4 encoder (scratch buffers grow to the largest stream seen).
class RangeStreamEncoder {
 public:
  /// Append the mode-4 stream of symbols[0:n) (each < 2^width, width in [1, 8]) with segments of
  /// `segment` symbols (n >= 1, 1 <= segment <= n, n % segment == 0), prior kRangeDefaultPrior.
  RangeStreamSize encode(const uint8_t* symbols, size_t n, int width, size_t segment,
                         std::vector<uint8_t>& out);
  /// The same stream with one given prior weight in [0, kRangeMaxPrior] (tests, tools).
  RangeStreamSize encode_with_prior(const uint8_t* symbols, size_t n, int width, size_t segment,
                                    int prior, std::vector<uint8_t>& out);

 private:
  /// Range-code the payload of the given prior into payload_.
  void code_payload(const uint8_t* symbols, size_t n, int width, size_t segment, int prior);
  void check_args(const uint8_t* symbols, size_t n, int width, size_t segment) const;
  std::vector<uint8_t> payload_;
};

/// Reusable mode-4 decoder.
class RangeStreamDecoder {
 public:
  /// Read the mode-4 fields that follow the mode byte and count (the caller has read both and
  /// checked count == n) and write the n symbols to out.
  void decode_body(ByteReader& in, uint8_t* out, size_t n, int width);
};

}  // namespace vq::coding

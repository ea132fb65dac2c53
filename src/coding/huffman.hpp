// Canonical order-0 Huffman coding of byte symbols, with a fixed-width fallback, and (on request)
// the segmented adaptive range coder of coding/range_coder.hpp.
//
// One call codes a sequence of n symbols, each < 2^width (width 1..8, the quantizer's bit width),
// into a self-delimiting stream appended to a byte vector. With EntropyPolicy::Huffman (the
// default) the stream is whichever of these is smallest (ties in this order): single-symbol, fixed
// width, Huffman. So a stream never costs more than fixed-width packing plus its 1 + varint(n)
// byte header. EntropyPolicy::Auto also codes the symbols in mode 4 (one adaptive model per
// segment of `segment_length` symbols) and keeps that stream only when it is strictly smaller.
//
// Stream layout (all counts are LEB128 varints, see byte_io.hpp; modes are never renumbered):
//   u8 mode                 0 = empty, 1 = single symbol, 2 = Huffman, 3 = fixed width,
//                           4 = segmented adaptive range coder (layout in range_coder.hpp)
//   varint count            number of symbols (must equal what the decoder expects)
//   mode 1:  u8 symbol
//   mode 2:  u8 alphabet_size - 1 (A <= 2^width),
//            ceil(A / 2) bytes of 4-bit code lengths: symbol 2k in the low nibble of byte k,
//            symbol 2k + 1 in the high nibble (0 = symbol unused, else 1..kMaxCodeLength; an odd
//            A leaves the last high nibble 0),
//            varint payload_bytes, then the payload
//   mode 3:  payload of ceil(count * width / 8) bytes
// Payload bits are MSB-first (byte_io.hpp); the last byte is zero-padded. Huffman codes are
// canonical (DEFLATE's rule): shorter codes first, within one length in symbol order, codes
// counting up; each code is written from its most significant bit.
//
// Decoding is table driven: one lookup on the next L_max bits (L_max <= 12) gives the symbol and
// its length (the fast decoder widens the window on long streams and takes up to four codes per
// lookup). Decoders check every field and throw vq::FormatError on a count that differs from
// the expected one, a symbol outside the alphabet, an invalid or over-subscribed code table, a
// truncated payload, payload bytes that are not exactly consumed, or nonzero padding bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "coding/byte_io.hpp"
#include "coding/range_coder.hpp"

namespace vq::coding {

/// Longest Huffman code (lengths are limited so the decode table has at most 4096 entries).
constexpr int kMaxCodeLength = 12;

enum class StreamMode : uint8_t { Empty = 0, Single = 1, Huffman = 2, Fixed = 3, Range = 4 };
static_assert(static_cast<uint8_t>(StreamMode::Range) == kRangeStreamMode);

/// Which stream modes an encoder may choose from. Decoders accept every mode regardless.
enum class EntropyPolicy : uint8_t {
  Huffman = 0,  ///< modes 0..3 only: the bytes this coder wrote before mode 4 existed
  Auto = 1,     ///< also try mode 4; keep it only when strictly smaller than the Huffman family
};
/// "huffman" / "auto".
const char* entropy_policy_name(EntropyPolicy p);

/// What one encoded stream cost, in bytes.
struct StreamSizes {
  StreamMode mode = StreamMode::Empty;
  int64_t overhead = 0;             ///< mode, count, symbol / code table, payload length
  int64_t payload = 0;              ///< coded symbol bits (padded to a byte)
  int64_t fixed_width_payload = 0;  ///< ceil(n * width / 8): the same symbols at fixed width
  int64_t total() const { return overhead + payload; }
};

/// Reusable encoder state (no allocation after the first few calls).
class HuffmanEncoder {
 public:
  /// Append the stream of symbols[0:n) (each < 2^width, width in [1, 8]) to `out`.
  /// Fast path: codes go out through a 64-bit accumulator, 32 bits per store into a buffer sized
  /// up front; fixed-width payloads are packed eight symbols (width bytes) at a time.
  StreamSizes encode(const uint8_t* symbols, size_t n, int width, std::vector<uint8_t>& out);
  /// The same with a policy. Auto (n >= 1) needs 1 <= segment_length <= n dividing n; mode 4 then
  /// gives each run of segment_length symbols its own adaptive model. Huffman ignores the length.
  StreamSizes encode(const uint8_t* symbols, size_t n, int width, std::vector<uint8_t>& out,
                     EntropyPolicy policy, size_t segment_length);
  /// The plain bit-at-a-time writer (reference for tests); produces the same bytes as encode().
  StreamSizes encode_reference(const uint8_t* symbols, size_t n, int width,
                               std::vector<uint8_t>& out);

  /// Code lengths chosen by the last Huffman-mode encode (diagnostics / tests), indexed by symbol.
  const std::vector<uint8_t>& last_lengths() const { return lengths_; }

 private:
  std::vector<uint64_t> freq_;
  std::vector<uint8_t> lengths_;
  std::vector<uint32_t> codes_;
  std::vector<uint8_t> range_stream_;
  RangeStreamEncoder range_;
  StreamSizes encode_impl(const uint8_t* symbols, size_t n, int width, std::vector<uint8_t>& out,
                          bool fast);
};

/// Reusable decoder state (the lookup table is rebuilt per stream, allocated once).
class HuffmanDecoder {
 public:
  /// Read one stream from `in` and write exactly n symbols (each < 2^width) to out.
  /// Fast path: a 64-bit bit buffer refilled once per four table lookups, each lookup on a
  /// window of up to 11 bits giving up to four complete codes (long streams), and fixed-width
  /// payloads unpacked eight symbols (width bytes) at a time.
  void decode(ByteReader& in, uint8_t* out, size_t n, int width);
  /// The plain one-symbol-per-step reader (reference for tests); same output and same errors.
  void decode_reference(ByteReader& in, uint8_t* out, size_t n, int width);
  /// Where one of several consecutive streams goes: n symbols of `width` bits.
  struct StreamSpec {
    uint8_t* out;
    size_t n;
    int width;
  };
  /// `count` consecutive streams: the same symbols, bytes consumed and errors as one decode()
  /// per stream, in order. The long Huffman streams' payloads are decoded two at a time, in one
  /// loop alternating between them (two independent chains of table lookups in flight).
  void decode_streams(ByteReader& in, const StreamSpec* streams, size_t count);

 private:
  /// A long Huffman stream whose header decode_impl has read and whose payload it left to
  /// decode_streams (its multi-symbol table is in *store).
  struct Deferred {
    std::vector<uint64_t>* store = nullptr;
    bool active = false;
    const uint8_t* payload = nullptr;
    uint64_t payload_bytes = 0;
    int window = 0;
    uint8_t* out = nullptr;
    size_t n = 0;
  };
  void decode_impl(ByteReader& in, uint8_t* out, size_t n, int width, bool fast,
                   Deferred* defer = nullptr);
  std::vector<uint16_t> table_;                // symbol | (length << 8); length 0 = no code
  std::vector<uint64_t> multi_;                // up to four symbols per lookup (see decode_multi)
  std::vector<std::vector<uint64_t>> stores_;  // decode_streams: one table per stream
  std::vector<Deferred> deferred_;
  RangeStreamDecoder range_;
};

/// Build length-limited Huffman code lengths (<= max_len) for freq[0:A); unused symbols get 0.
/// Needs at least two symbols with nonzero frequency. Deterministic (ties by symbol / node order).
void huffman_code_lengths(const std::vector<uint64_t>& freq, int max_len,
                          std::vector<uint8_t>& lengths);

/// Canonical codes for the given lengths (DEFLATE rule). codes[s] is meaningful where lengths[s] >
/// 0.
void canonical_codes(const std::vector<uint8_t>& lengths, std::vector<uint32_t>& codes);

}  // namespace vq::coding

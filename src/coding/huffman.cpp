#include "coding/huffman.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "veloxquant/errors.hpp"

namespace vq::coding {

namespace {

int64_t fixed_bytes(size_t n, int width) {
  return static_cast<int64_t>((static_cast<uint64_t>(n) * static_cast<uint64_t>(width) + 7) / 8);
}

// Writes an MSB-first bit string into a pre-sized buffer, 32 bits per store. Produces the same
// bytes as BitWriter; never writes past the bytes the bits fill (the caller sizes the buffer).
class FastBitWriter {
 public:
  explicit FastBitWriter(uint8_t* p) : p_(p) {}
  void put(uint32_t code, int len) {  // len <= 32, nbits_ < 32 on entry
    acc_ = (acc_ << len) | code;
    nbits_ += len;
    if (nbits_ >= 32) {
      nbits_ -= 32;
      const uint32_t w = static_cast<uint32_t>(acc_ >> nbits_);
      p_[0] = static_cast<uint8_t>(w >> 24);
      p_[1] = static_cast<uint8_t>(w >> 16);
      p_[2] = static_cast<uint8_t>(w >> 8);
      p_[3] = static_cast<uint8_t>(w);
      p_ += 4;
    }
  }
  /// Flush whole bytes and the zero-padded last byte; returns the end pointer.
  uint8_t* finish() {
    while (nbits_ >= 8) {
      nbits_ -= 8;
      *p_++ = static_cast<uint8_t>(acc_ >> nbits_);
    }
    if (nbits_ > 0) *p_++ = static_cast<uint8_t>(acc_ << (8 - nbits_));
    nbits_ = 0;
    return p_;
  }

 private:
  uint8_t* p_;
  uint64_t acc_ = 0;
  int nbits_ = 0;
};

// Fixed-width packing, eight symbols (W bytes) per step; the n % 8 tail goes bit by bit.
template <int W>
void pack_fixed(const uint8_t* sym, size_t n, uint8_t* p) {
  const size_t groups = n / 8;
  for (size_t g = 0; g < groups; ++g, sym += 8, p += W) {
    uint64_t v = 0;
    for (int j = 0; j < 8; ++j) v = (v << W) | sym[j];
    for (int b = 0; b < W; ++b) p[b] = static_cast<uint8_t>(v >> (8 * (W - 1 - b)));
  }
  FastBitWriter bw(p);
  for (size_t i = 0; i < n % 8; ++i) bw.put(sym[i], W);
  bw.finish();
}

void pack_fixed_any(const uint8_t* sym, size_t n, int width, uint8_t* p) {
  switch (width) {
    case 1:
      return pack_fixed<1>(sym, n, p);
    case 2:
      return pack_fixed<2>(sym, n, p);
    case 3:
      return pack_fixed<3>(sym, n, p);
    case 4:
      return pack_fixed<4>(sym, n, p);
    case 5:
      return pack_fixed<5>(sym, n, p);
    case 6:
      return pack_fixed<6>(sym, n, p);
    case 7:
      return pack_fixed<7>(sym, n, p);
    default:
      std::memcpy(p, sym, n);
      return;
  }
}

// The matching unpacker: eight symbols from W bytes per step, for the n - n % 8 leading symbols.
template <int W>
void unpack_fixed(const uint8_t* p, size_t groups, uint8_t* out) {
  constexpr uint64_t mask = (uint64_t{1} << W) - 1;
  for (size_t g = 0; g < groups; ++g, p += W, out += 8) {
    uint64_t v = 0;
    for (int b = 0; b < W; ++b) v = (v << 8) | p[b];
    for (int j = 0; j < 8; ++j) out[j] = static_cast<uint8_t>((v >> (W * (7 - j))) & mask);
  }
}

void unpack_fixed_any(const uint8_t* p, size_t groups, int width, uint8_t* out) {
  switch (width) {
    case 1:
      return unpack_fixed<1>(p, groups, out);
    case 2:
      return unpack_fixed<2>(p, groups, out);
    case 3:
      return unpack_fixed<3>(p, groups, out);
    case 4:
      return unpack_fixed<4>(p, groups, out);
    case 5:
      return unpack_fixed<5>(p, groups, out);
    case 6:
      return unpack_fixed<6>(p, groups, out);
    case 7:
      return unpack_fixed<7>(p, groups, out);
    default:
      std::memcpy(out, p, 8 * groups);
      return;
  }
}

[[noreturn]] __attribute__((noinline, cold)) void throw_invalid_code(size_t at) {
  VQ_THROW(FormatError, "Huffman payload: invalid code at symbol ", at);
}

// MSB-first reader for the Huffman hot loop: after refill() at least 57 bits are buffered, so
// four codes of at most kMaxCodeLength (12) bits decode without another refill. Past the end it
// reads zero bits (the caller checks the consumed count against the payload size).
struct FastBitReader {
  const uint8_t* p;
  const uint8_t* end;
  uint64_t buf = 0;
  int have = 0;
  __attribute__((always_inline)) void refill() {
    if (end - p >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      w = __builtin_bswap64(w);
      if (have < 64) buf |= w >> have;
      const int take = (64 - have) >> 3;
      p += take;
      have += 8 * take;
      return;
    }
    while (have <= 56) {
      const uint64_t byte = p < end ? *p++ : 0u;
      buf |= byte << (56 - have);
      have += 8;
    }
  }
};

// The multi-symbol table on a `window`-bit lookup (window >= the longest code). Entry =
// symbols (bytes 0..3) | count << 32 | total bits << 40 | first code's length << 48; count 0 =
// the window does not start with a valid code. Built by walking the sequences of up to four
// codes whose lengths fit in the window: a sequence owns the contiguous range of window values
// that start with it, filled before its extensions overwrite their own sub-ranges, so each value
// ends with its longest sequence. Every level fills disjoint ranges: at most 4 * 2^window stores.
// `len`, `code`, `sym`: the `count` codes in canonical order (ascending length).
void build_multi(const uint8_t* len, const uint32_t* code, const uint8_t* sym, int count,
                 int window, uint64_t* multi) {
  std::fill(multi, multi + (size_t{1} << window), uint64_t{0});
  auto walk = [&](auto& self, uint32_t prefix, int bits, uint32_t syms, int cnt,
                  int first_len) -> void {
    for (int c = 0; c < count; ++c) {
      const int l = len[c];
      if (bits + l > window) break;  // ascending lengths: no longer code fits either
      const uint32_t p = (prefix << l) | code[c];
      const int b = bits + l;
      const int fl = cnt == 0 ? l : first_len;
      const uint32_t sy = syms | (static_cast<uint32_t>(sym[c]) << (8 * cnt));
      const uint64_t e = sy | (static_cast<uint64_t>(cnt + 1) << 32) |
                         (static_cast<uint64_t>(b) << 40) | (static_cast<uint64_t>(fl) << 48);
      const size_t first = static_cast<size_t>(p) << (window - b);
      std::fill(multi + first, multi + first + (size_t{1} << (window - b)), e);
      if (cnt + 1 < 4) self(self, p, b, sy, cnt + 1, fl);
    }
  };
  walk(walk, 0u, 0, 0u, 0, 0);
}

// The multi-symbol loop (see decode_impl): one lookup on the next `window` bits gives up to
// four complete codes (entries: build_multi); count 0 = the first code is invalid. Runs while at
// least 16 symbols remain (four lookups write at most 16 bytes), starting at out[i]; returns the
// next index and adds the bits it consumed to `used`. A separate function with its state in locals,
// so that the bit buffer stays in registers.
__attribute__((noinline)) size_t decode_multi(FastBitReader& reader, const uint64_t* multi,
                                              int window, uint8_t* out, size_t i, size_t n,
                                              uint64_t& used) {
  FastBitReader fr = reader;
  const int shift = 64 - window;
  uint64_t bits = 0;
  while (i + 16 <= n) {  // four lookups use at most 4 * window <= 48 buffered bits
    fr.refill();
    for (int t = 0; t < 4; ++t) {
      const uint64_t e = multi[fr.buf >> shift];
      const size_t cnt = static_cast<size_t>((e >> 32) & 0xFFu);
      const int l = static_cast<int>((e >> 40) & 0xFFu);
      if (__builtin_expect(cnt == 0, 0)) throw_invalid_code(i);
      const uint32_t syms = static_cast<uint32_t>(e);
      std::memcpy(out + i, &syms, 4);  // all four bytes written; i + 4 <= n here
      fr.buf <<= l;
      fr.have -= l;
      bits += static_cast<uint64_t>(l);
      i += cnt;
    }
  }
  reader = fr;
  used += bits;
  return i;
}

// One step of the multi-symbol loop on one stream (see decode_multi).
struct MultiLane {
  FastBitReader fr;
  const uint64_t* multi;
  uint8_t* out;
  size_t i, n;
  uint64_t bits = 0;
  int shift;
  __attribute__((always_inline)) void step() {
    const uint64_t e = multi[fr.buf >> shift];
    const size_t cnt = static_cast<size_t>((e >> 32) & 0xFFu);
    const int l = static_cast<int>((e >> 40) & 0xFFu);
    if (__builtin_expect(cnt == 0, 0)) throw_invalid_code(i);
    const uint32_t syms = static_cast<uint32_t>(e);
    std::memcpy(out + i, &syms, 4);
    fr.buf <<= l;
    fr.have -= l;
    bits += static_cast<uint64_t>(l);
    i += cnt;
  }
};

// decode_multi on two independent streams at once, alternating their lookups: each stream's
// lookups form a chain (the next window position needs the last code's length), so two chains
// in flight keep the core busy while either waits for its table load. Runs while both streams
// have at least 16 symbols left; the caller finishes each one alone.
__attribute__((noinline)) void decode_multi2(MultiLane& a0, MultiLane& b0) {
  MultiLane a = a0, b = b0;
  while (a.i + 16 <= a.n && b.i + 16 <= b.n) {
    a.fr.refill();
    b.fr.refill();
    for (int t = 0; t < 4; ++t) {
      a.step();
      b.step();
    }
  }
  a0 = a;
  b0 = b;
}

// The end-of-payload checks of the fast reader: `used` bits consumed by n symbols out of a
// payload of `payload` bytes.
void check_payload_end(FastBitReader& fr, uint64_t used, uint64_t payload, size_t n) {
  VQ_CHECK(used <= 8 * payload, FormatError, "Huffman payload is truncated: decoding ", n,
           " symbols needs ", used, " bits but only ", 8 * payload, " are stored");
  VQ_CHECK((used + 7) / 8 == payload, FormatError, "Huffman payload: ", payload,
           " bytes stored but the ", n, " symbols use only ", (used + 7) / 8);
  const int pad = static_cast<int>(8 * payload - used);
  fr.refill();
  VQ_CHECK(pad == 0 || (fr.buf >> (64 - pad)) == 0, FormatError,
           "Huffman payload: nonzero padding bits");
}

// The rest of a multi-table stream from lane.i on: decode_multi while 16 symbols remain, then
// one code per lookup (the entry's first code), then the end checks.
void finish_multi(MultiLane& lane, int window, uint64_t payload) {
  uint64_t used = lane.bits;
  size_t i = decode_multi(lane.fr, lane.multi, window, lane.out, lane.i, lane.n, used);
  FastBitReader& fr = lane.fr;
  const uint64_t* multi = lane.multi;
  uint8_t* out = lane.out;
  const int shift = lane.shift;
  auto one = [&](size_t at) __attribute__((always_inline)) {
    const uint64_t e = multi[fr.buf >> shift];
    const int l = ((e >> 32) & 0xFFu) == 0 ? 0 : static_cast<int>((e >> 48) & 0xFFu);
    if (__builtin_expect(l == 0, 0)) throw_invalid_code(at);
    out[at] = static_cast<uint8_t>(e & 0xFFu);
    fr.buf <<= l;
    fr.have -= l;
    used += static_cast<uint64_t>(l);
  };
  for (; i + 4 <= lane.n; i += 4) {
    fr.refill();
    one(i);
    one(i + 1);
    one(i + 2);
    one(i + 3);
  }
  for (; i < lane.n; ++i) {
    fr.refill();
    one(i);
  }
  check_payload_end(fr, used, payload, lane.n);
}

}  // namespace

void huffman_code_lengths(const std::vector<uint64_t>& freq, int max_len,
                          std::vector<uint8_t>& lengths) {
  const size_t A = freq.size();
  lengths.assign(A, 0);
  // Fixed-size scratch on the stack (A <= 256 symbols, so at most 511 tree nodes): no allocation.
  assert(A <= 256);
  int32_t leaf_symbol[256];
  size_t m = 0;
  for (size_t s = 0; s < A; ++s)
    if (freq[s] > 0) leaf_symbol[m++] = static_cast<int32_t>(s);
  assert(m >= 2);
  assert((size_t{1} << max_len) >= m);

  // Huffman tree: leaves 0..m-1 (symbol order), internal nodes m..2m-2 in creation order; the two
  // lightest nodes merge first, ties broken by the lower node index.
  const size_t total = 2 * m - 1;
  uint64_t weight[511];
  int32_t parent[511];
  for (size_t i = 0; i < 511; ++i) parent[i] = -1;
  for (size_t i = 0; i < m; ++i) weight[i] = freq[static_cast<size_t>(leaf_symbol[i])];
  // Merge order: always the two lightest nodes by (weight, node index). Leaves sorted by that key
  // form one queue; internal nodes are created with nondecreasing weights and increasing
  // indices, so in creation order they form a second sorted queue, and the lighter of the two
  // queue heads is the global minimum (the same choices as a min-heap on (weight, index)).
  int32_t leaves[256];
  for (size_t i = 0; i < m; ++i) leaves[i] = static_cast<int32_t>(i);
  // Sorted by (weight, index): an insertion sort for the usual small alphabets, otherwise a
  // least-significant-digit radix sort on the weight's bytes (stable, so ties keep the index
  // order; as many 8-bit passes as the largest weight needs, on the stack).
  auto before = [&](int32_t a, int32_t b) {
    const uint64_t wa = weight[static_cast<size_t>(a)], wb = weight[static_cast<size_t>(b)];
    return wa < wb || (wa == wb && a < b);
  };
  if (m <= 32) {
    for (size_t i = 1; i < m; ++i) {
      const int32_t x = leaves[i];
      size_t j = i;
      for (; j > 0 && before(x, leaves[j - 1]); --j) leaves[j] = leaves[j - 1];
      leaves[j] = x;
    }
  } else {
    uint64_t heaviest = 0;
    for (size_t i = 0; i < m; ++i) heaviest = std::max(heaviest, weight[i]);
    int32_t tmp[256];
    int32_t* src = leaves;
    int32_t* dst = tmp;
    for (int shift = 0; shift < 64 && (heaviest >> shift) != 0; shift += 8) {
      size_t count[257] = {};
      for (size_t i = 0; i < m; ++i)
        ++count[((weight[static_cast<size_t>(src[i])] >> shift) & 0xff) + 1];
      for (size_t d = 1; d <= 256; ++d) count[d] += count[d - 1];
      for (size_t i = 0; i < m; ++i)
        dst[count[(weight[static_cast<size_t>(src[i])] >> shift) & 0xff]++] = src[i];
      std::swap(src, dst);
    }
    if (src != leaves) std::copy(src, src + m, leaves);
  }
  size_t lq = 0, iq = m;  // heads of the leaf queue and of the internal-node queue
  for (size_t next = m; next < total; ++next) {
    int32_t pick[2];
    for (int t = 0; t < 2; ++t) {
      bool take_leaf = lq < m;
      if (take_leaf && iq < next) {
        const size_t a = static_cast<size_t>(leaves[lq]);
        take_leaf = weight[a] < weight[iq] || (weight[a] == weight[iq] && a < iq);
      }
      pick[t] = take_leaf ? leaves[lq++] : static_cast<int32_t>(iq++);
    }
    weight[next] = weight[static_cast<size_t>(pick[0])] + weight[static_cast<size_t>(pick[1])];
    parent[static_cast<size_t>(pick[0])] = static_cast<int32_t>(next);
    parent[static_cast<size_t>(pick[1])] = static_cast<int32_t>(next);
  }
  int depth[511];
  depth[total - 1] = 0;
  for (size_t i = total - 1; i-- > 0;) depth[i] = depth[static_cast<size_t>(parent[i])] + 1;
  int longest = 0;
  for (size_t i = 0; i < m; ++i) longest = std::max(longest, depth[i]);

  int len[256];
  for (size_t i = 0; i < m; ++i) len[i] = depth[i];
  if (longest > max_len) {
    // Length limiting: clamp, then lengthen the cheapest codes until the Kraft sum fits, then
    // shorten the most frequent codes while it still fits.
    const int64_t cap = int64_t{1} << max_len;
    int64_t kraft = 0;
    for (size_t i = 0; i < m; ++i) {
      len[i] = std::min(len[i], max_len);
      kraft += int64_t{1} << (max_len - len[i]);
    }
    while (kraft > cap) {
      size_t pick = m;
      for (size_t i = 0; i < m; ++i) {
        if (len[i] >= max_len) continue;
        if (pick == m || len[i] > len[pick] || (len[i] == len[pick] && weight[i] < weight[pick]))
          pick = i;
      }
      kraft -= int64_t{1} << (max_len - len[pick] - 1);
      ++len[pick];
    }
    size_t by_freq[256];
    for (size_t i = 0; i < m; ++i) by_freq[i] = i;
    std::stable_sort(by_freq, by_freq + m,
                     [&](size_t a, size_t b) { return weight[a] > weight[b]; });
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t q = 0; q < m; ++q) {
        const size_t i = by_freq[q];
        if (len[i] > 1 && kraft + (int64_t{1} << (max_len - len[i])) <= cap) {
          kraft += int64_t{1} << (max_len - len[i]);
          --len[i];
          changed = true;
        }
      }
    }
  }
  for (size_t i = 0; i < m; ++i)
    lengths[static_cast<size_t>(leaf_symbol[i])] = static_cast<uint8_t>(len[i]);
}

void canonical_codes(const std::vector<uint8_t>& lengths, std::vector<uint32_t>& codes) {
  uint32_t bl_count[kMaxCodeLength + 2] = {};
  for (uint8_t l : lengths)
    if (l > 0) ++bl_count[l];
  uint32_t next_code[kMaxCodeLength + 2] = {};
  uint32_t code = 0;
  for (int bits = 1; bits <= kMaxCodeLength; ++bits) {
    code = (code + bl_count[bits - 1]) << 1;
    next_code[bits] = code;
  }
  codes.assign(lengths.size(), 0);
  for (size_t s = 0; s < lengths.size(); ++s)
    if (lengths[s] > 0) codes[s] = next_code[lengths[s]]++;
}

StreamSizes HuffmanEncoder::encode(const uint8_t* symbols, size_t n, int width,
                                   std::vector<uint8_t>& out) {
  return encode_impl(symbols, n, width, out, true);
}

const char* entropy_policy_name(EntropyPolicy p) {
  switch (p) {
    case EntropyPolicy::Huffman:
      return "huffman";
    case EntropyPolicy::Auto:
      return "auto";
  }
  return "?";
}

StreamSizes HuffmanEncoder::encode(const uint8_t* symbols, size_t n, int width,
                                   std::vector<uint8_t>& out, EntropyPolicy policy,
                                   size_t segment_length) {
  if (policy == EntropyPolicy::Huffman || n == 0) return encode_impl(symbols, n, width, out, true);
  VQ_CHECK(policy == EntropyPolicy::Auto, InvalidArgument, "entropy encode: unknown policy ",
           int(policy));
  VQ_CHECK(segment_length >= 1 && segment_length <= n && n % segment_length == 0, InvalidArgument,
           "entropy encode: segment length ", segment_length, " must be in [1, ", n,
           "] and divide the count ", n);
  const size_t start = out.size();
  StreamSizes sz = encode_impl(symbols, n, width, out, true);
  // A single-symbol stream (1 + varint(n) + 1 bytes) is smaller than any mode-4 header.
  if (sz.mode == StreamMode::Single) return sz;
  range_stream_.clear();
  const RangeStreamSize rs = range_.encode(symbols, n, width, segment_length, range_stream_);
  if (rs.total() < sz.total()) {
    out.resize(start);
    out.insert(out.end(), range_stream_.begin(), range_stream_.end());
    sz.mode = StreamMode::Range;
    sz.overhead = rs.overhead;
    sz.payload = rs.payload;
  }
  return sz;
}

StreamSizes HuffmanEncoder::encode_reference(const uint8_t* symbols, size_t n, int width,
                                             std::vector<uint8_t>& out) {
  return encode_impl(symbols, n, width, out, false);
}

StreamSizes HuffmanEncoder::encode_impl(const uint8_t* symbols, size_t n, int width,
                                        std::vector<uint8_t>& out, bool fast) {
  VQ_CHECK(width >= 1 && width <= 8, InvalidArgument, "huffman encode: width = ", width,
           " is out of range; allowed [1, 8]");
  StreamSizes sz;
  const int64_t header = 1 + varint_size(n);
  sz.fixed_width_payload = fixed_bytes(n, width);
  if (n == 0) {
    put_u8(out, static_cast<uint8_t>(StreamMode::Empty));
    put_varint(out, 0);
    sz.mode = StreamMode::Empty;
    sz.overhead = header;
    return sz;
  }
  const size_t alphabet = size_t{1} << width;
  freq_.assign(256, 0);
  if (n < (size_t{1} << 32)) {
    // Four interleaved histograms: runs of one symbol do not serialize on a single counter.
    uint32_t h[4][256] = {};
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
      ++h[0][symbols[i]];
      ++h[1][symbols[i + 1]];
      ++h[2][symbols[i + 2]];
      ++h[3][symbols[i + 3]];
    }
    for (; i < n; ++i) ++h[0][symbols[i]];
    for (size_t s = 0; s < 256; ++s)
      freq_[s] = uint64_t{h[0][s]} + uint64_t{h[1][s]} + uint64_t{h[2][s]} + uint64_t{h[3][s]};
  } else {
    for (size_t i = 0; i < n; ++i) ++freq_[symbols[i]];
  }
  size_t A = 0, distinct = 0;
  for (size_t s = 0; s < 256; ++s)
    if (freq_[s] > 0) {
      A = s + 1;
      ++distinct;
    }
  VQ_CHECK(A <= alphabet, InvalidArgument, "huffman encode: symbol ", A - 1,
           " does not fit in width ", width);

  if (distinct == 1) {
    put_u8(out, static_cast<uint8_t>(StreamMode::Single));
    put_varint(out, n);
    put_u8(out, static_cast<uint8_t>(A - 1));
    sz.mode = StreamMode::Single;
    sz.overhead = header + 1;
    return sz;
  }

  freq_.resize(A);
  // Every code is at least one bit: when even that payload and the table cannot undercut the
  // fixed-width stream (short streams of wide codes), the Huffman stream would lose, so its code
  // lengths are not computed. The same choice, and the same bytes, as computing them.
  const int64_t min_payload = static_cast<int64_t>((n + 7) / 8);
  const bool may_win = header + 1 + static_cast<int64_t>((A + 1) / 2) +
                           varint_size(static_cast<uint64_t>(min_payload)) + min_payload <
                       header + sz.fixed_width_payload;
  int64_t huff_payload = 0, huff_overhead = 0;
  if (may_win) {
    huffman_code_lengths(freq_, kMaxCodeLength, lengths_);
    uint64_t bits = 0;
    for (size_t s = 0; s < A; ++s) bits += freq_[s] * lengths_[s];
    huff_payload = static_cast<int64_t>((bits + 7) / 8);
    huff_overhead = header + 1 + static_cast<int64_t>((A + 1) / 2) +
                    varint_size(static_cast<uint64_t>(huff_payload));
  }
  if (may_win && huff_overhead + huff_payload < header + sz.fixed_width_payload) {
    canonical_codes(lengths_, codes_);
    put_u8(out, static_cast<uint8_t>(StreamMode::Huffman));
    put_varint(out, n);
    put_u8(out, static_cast<uint8_t>(A - 1));
    for (size_t s = 0; s < A; s += 2) {
      const uint8_t lo = lengths_[s];
      const uint8_t hi = s + 1 < A ? lengths_[s + 1] : 0;
      put_u8(out, static_cast<uint8_t>(lo | (hi << 4)));
    }
    put_varint(out, static_cast<uint64_t>(huff_payload));
    const size_t start = out.size();
    if (fast) {
      out.resize(start + static_cast<size_t>(huff_payload));
      FastBitWriter bw(out.data() + start);
      const uint32_t* codes = codes_.data();
      const uint8_t* lens = lengths_.data();
      size_t i = 0;
      if (width <= 4 && n >= 64) {
        // Two symbols per put: the pair's codes concatenated (<= 2 x 12 bits), looked up by
        // s0 | s1 << width in a table of every pair of the alphabet. The same bits as one put
        // per symbol, with half the serial shift-and-or steps on the bit buffer.
        uint32_t pair_code[256];
        uint8_t pair_len[256];
        for (size_t s1 = 0; s1 < A; ++s1)
          for (size_t s0 = 0; s0 < A; ++s0) {
            const size_t at = s0 | (s1 << width);
            pair_code[at] = (codes[s0] << lens[s1]) | codes[s1];
            pair_len[at] = static_cast<uint8_t>(lens[s0] + lens[s1]);
          }
        for (; i + 2 <= n; i += 2) {
          const size_t at = symbols[i] | (static_cast<size_t>(symbols[i + 1]) << width);
          bw.put(pair_code[at], pair_len[at]);
        }
      }
      for (; i < n; ++i) bw.put(codes[symbols[i]], lens[symbols[i]]);
      [[maybe_unused]] const uint8_t* e = bw.finish();
      assert(e == out.data() + out.size());
    } else {
      out.reserve(start + static_cast<size_t>(huff_payload));
      BitWriter bw(out);
      for (size_t i = 0; i < n; ++i) bw.put(codes_[symbols[i]], lengths_[symbols[i]]);
      bw.finish();
    }
    assert(static_cast<int64_t>(out.size() - start) == huff_payload);
    sz.mode = StreamMode::Huffman;
    sz.overhead = huff_overhead;
    sz.payload = huff_payload;
    return sz;
  }

  put_u8(out, static_cast<uint8_t>(StreamMode::Fixed));
  put_varint(out, n);
  if (fast) {
    const size_t start = out.size();
    out.resize(start + static_cast<size_t>(sz.fixed_width_payload));
    pack_fixed_any(symbols, n, width, out.data() + start);
  } else {
    out.reserve(out.size() + static_cast<size_t>(sz.fixed_width_payload));
    BitWriter bw(out);
    for (size_t i = 0; i < n; ++i) bw.put(symbols[i], width);
    bw.finish();
  }
  sz.mode = StreamMode::Fixed;
  sz.overhead = header;
  sz.payload = sz.fixed_width_payload;
  return sz;
}

void HuffmanDecoder::decode(ByteReader& in, uint8_t* out, size_t n, int width) {
  decode_impl(in, out, n, width, true);
}

void HuffmanDecoder::decode_reference(ByteReader& in, uint8_t* out, size_t n, int width) {
  decode_impl(in, out, n, width, false);
}

void HuffmanDecoder::decode_streams(ByteReader& in, const StreamSpec* streams, size_t count) {
  const ByteReader start = in;
  try {
    if (stores_.size() < count) stores_.resize(count);
    deferred_.assign(count, Deferred{});
    // Every header in order (short streams and other modes are decoded on the way), the long
    // Huffman streams' payloads skipped and left for the paired loop below.
    for (size_t k = 0; k < count; ++k) {
      deferred_[k].store = &stores_[k];
      decode_impl(in, streams[k].out, streams[k].n, streams[k].width, true, &deferred_[k]);
    }
    auto lane = [](const Deferred& d) {
      return MultiLane{FastBitReader{d.payload, d.payload + d.payload_bytes},
                       d.store->data(),
                       d.out,
                       0,
                       d.n,
                       0,
                       64 - d.window};
    };
    const Deferred* first = nullptr;  // a long stream waiting for a partner
    for (size_t k = 0; k < count; ++k) {
      const Deferred& d = deferred_[k];
      if (!d.active) continue;
      if (first == nullptr) {
        first = &d;
        continue;
      }
      MultiLane la = lane(*first), lb = lane(d);
      decode_multi2(la, lb);
      finish_multi(la, first->window, first->payload_bytes);
      finish_multi(lb, d.window, d.payload_bytes);
      first = nullptr;
    }
    if (first != nullptr) {
      MultiLane la = lane(*first);
      finish_multi(la, first->window, first->payload_bytes);
    }
  } catch (const Error&) {
    // Read the streams again one after the other, so that a bad input fails with exactly the
    // error (and the first one) that one decode() call per stream would give.
    in = start;
    for (size_t k = 0; k < count; ++k)
      decode_impl(in, streams[k].out, streams[k].n, streams[k].width, true);
  }
}

void HuffmanDecoder::decode_impl(ByteReader& in, uint8_t* out, size_t n, int width, bool fast,
                                 Deferred* defer) {
  VQ_CHECK(width >= 1 && width <= 8, InvalidArgument, "huffman decode: width = ", width,
           " is out of range; allowed [1, 8]");
  const uint8_t mode = in.u8("entropy stream mode");
  const uint64_t count = in.varint("entropy stream count", UINT64_MAX);
  VQ_CHECK(count == n, FormatError, "entropy stream holds ", count, " symbols but ", n,
           " were expected");
  const uint32_t alphabet = 1u << width;
  switch (static_cast<StreamMode>(mode)) {
    case StreamMode::Empty:
      VQ_CHECK(n == 0, FormatError, "entropy stream: empty mode with count ", n);
      return;
    case StreamMode::Single: {
      VQ_CHECK(n > 0, FormatError, "entropy stream: single-symbol mode with count 0");
      const uint8_t sym = in.u8("entropy stream symbol");
      VQ_CHECK(sym < alphabet, FormatError, "entropy stream: symbol ", int(sym),
               " does not fit in width ", width);
      std::fill(out, out + n, sym);
      return;
    }
    case StreamMode::Fixed: {
      VQ_CHECK(n > 0, FormatError, "entropy stream: fixed mode with count 0");
      const size_t bytes = static_cast<size_t>(fixed_bytes(n, width));
      in.need(bytes, "fixed-width payload");
      const size_t groups = fast ? n / 8 : 0;
      unpack_fixed_any(in.cursor(), groups, width, out);
      const size_t head = groups * static_cast<size_t>(width);  // bytes the groups used
      BitReader br(in.cursor() + head, bytes - head);
      for (size_t i = 8 * groups; i < n; ++i) out[i] = static_cast<uint8_t>(br.get(width));
      const int pad =
          static_cast<int>(8 * (bytes - head) - (n - 8 * groups) * static_cast<size_t>(width));
      VQ_CHECK(pad == 0 || br.get(pad) == 0, FormatError,
               "fixed-width payload: nonzero padding bits");
      in.skip(bytes, "fixed-width payload");
      return;
    }
    case StreamMode::Huffman: {
      VQ_CHECK(n > 0, FormatError, "entropy stream: Huffman mode with count 0");
      const uint32_t A = static_cast<uint32_t>(in.u8("Huffman alphabet size")) + 1;
      VQ_CHECK(A >= 2 && A <= alphabet, FormatError, "Huffman table: alphabet size ", A,
               " is outside [2, ", alphabet, "] for width ", width);
      in.need((A + 1) / 2, "Huffman code lengths");
      const uint8_t* lp = in.cursor();
      uint8_t lengths[256];
      int max_len = 0, used = 0;
      uint64_t kraft = 0;  // in units of 2^-kMaxCodeLength
      for (uint32_t s = 0; s < A; ++s) {
        const uint8_t l = (s & 1) ? (lp[s / 2] >> 4) : (lp[s / 2] & 0x0Fu);
        VQ_CHECK(l <= kMaxCodeLength, FormatError, "Huffman table: code length ", int(l),
                 " for symbol ", s, " exceeds ", kMaxCodeLength);
        lengths[s] = l;
        if (l > 0) {
          ++used;
          max_len = std::max<int>(max_len, l);
          kraft += uint64_t{1} << (kMaxCodeLength - l);
        }
      }
      VQ_CHECK((A & 1) == 0 || (lp[A / 2] >> 4) == 0, FormatError,
               "Huffman table: nonzero padding nibble");
      VQ_CHECK(used >= 2, FormatError, "Huffman table: ", used,
               " symbols have codes; at least 2 are needed");
      VQ_CHECK(kraft <= (uint64_t{1} << kMaxCodeLength), FormatError,
               "Huffman table: code lengths are over-subscribed (Kraft sum > 1)");
      in.skip((A + 1) / 2, "Huffman code lengths");
      const uint64_t payload =
          in.varint("Huffman payload size", (static_cast<uint64_t>(n) * kMaxCodeLength + 7) / 8);
      in.need(static_cast<size_t>(payload), "Huffman payload");

      // Lookup window: max_len bits, widened (up to 11) while the stream is long enough to repay
      // the larger table, so that one lookup of the multi-symbol table below covers more codes.
      int window = max_len;
      if (fast)
        while (window < 11 && (size_t{1} << (window + 1)) * 8 <= n) ++window;
      const size_t tsize = size_t{1} << window;
      // Canonical codes (DEFLATE rule), in (length, symbol) order.
      uint32_t bl_count[kMaxCodeLength + 2] = {};
      for (uint32_t s = 0; s < A; ++s)
        if (lengths[s]) ++bl_count[lengths[s]];
      uint32_t next_code[kMaxCodeLength + 2] = {};
      uint32_t code = 0;
      for (int b = 1; b <= kMaxCodeLength; ++b) {
        code = (code + bl_count[b - 1]) << 1;
        next_code[b] = code;
      }
      uint8_t c_len[256], c_sym[256];
      uint32_t c_code[256];
      int ncodes = 0, slot[kMaxCodeLength + 2] = {};  // first position of each length
      for (int l = 1; l <= kMaxCodeLength; ++l) {
        slot[l] = ncodes;
        ncodes += static_cast<int>(bl_count[l]);
      }
      for (uint32_t s = 0; s < A; ++s) {  // one pass: symbols in order within each length
        const int l = lengths[s];
        if (l == 0) continue;
        const int at = slot[l]++;
        c_len[at] = static_cast<uint8_t>(l);
        c_sym[at] = static_cast<uint8_t>(s);
        c_code[at] = next_code[l]++;
      }
      // Up to four codes per lookup (build_multi) on streams long enough to repay the
      // 2^window-entry table; otherwise one code per lookup.
      const bool use_multi = fast && n >= 2 * tsize && n >= 64;
      if (use_multi) {
        std::vector<uint64_t>& mt = defer != nullptr ? *defer->store : multi_;
        mt.resize(tsize);
        build_multi(c_len, c_code, c_sym, ncodes, window, mt.data());
        if (defer != nullptr) {  // decode_streams runs the payload later, paired with another
          defer->active = true;
          defer->payload = in.cursor();
          defer->payload_bytes = payload;
          defer->window = window;
          defer->out = out;
          defer->n = n;
        } else {
          MultiLane lane{FastBitReader{in.cursor(), in.cursor() + payload},
                         mt.data(),
                         out,
                         0,
                         n,
                         0,
                         64 - window};
          finish_multi(lane, window, payload);
        }
        in.skip(static_cast<size_t>(payload), "Huffman payload");
        return;
      }
      // Lookup table on the next `window` bits: entry = symbol | (length << 8), 0 = no code.
      table_.assign(tsize, 0);
      for (int c = 0; c < ncodes; ++c) {
        const size_t first = static_cast<size_t>(c_code[c]) << (window - c_len[c]);
        const size_t span = size_t{1} << (window - c_len[c]);
        std::fill(table_.begin() + static_cast<std::ptrdiff_t>(first),
                  table_.begin() + static_cast<std::ptrdiff_t>(first + span),
                  static_cast<uint16_t>(c_sym[c] | (static_cast<uint32_t>(c_len[c]) << 8)));
      }
      if (fast) {
        FastBitReader fr{in.cursor(), in.cursor() + payload};
        const int shift = 64 - window;
        uint64_t used = 0;
        size_t i = 0;
        const uint16_t* table = table_.data();
        auto one = [&](size_t at) __attribute__((always_inline)) {
          const uint16_t e = table[fr.buf >> shift];
          const int l = e >> 8;
          if (__builtin_expect(l == 0, 0)) throw_invalid_code(at);
          out[at] = static_cast<uint8_t>(e & 0xFFu);
          fr.buf <<= l;
          fr.have -= l;
          used += static_cast<uint64_t>(l);
        };
        for (; i + 4 <= n; i += 4) {
          fr.refill();
          one(i);
          one(i + 1);
          one(i + 2);
          one(i + 3);
        }
        for (; i < n; ++i) {
          fr.refill();
          one(i);
        }
        check_payload_end(fr, used, payload, n);
        in.skip(static_cast<size_t>(payload), "Huffman payload");
        return;
      }
      const uint16_t* table = table_.data();
      BitReader br(in.cursor(), static_cast<size_t>(payload));
      for (size_t i = 0; i < n; ++i) {
        const uint16_t e = table[br.peek(max_len)];
        const int l = e >> 8;
        if (l == 0) VQ_THROW(FormatError, "Huffman payload: invalid code at symbol ", i);
        out[i] = static_cast<uint8_t>(e & 0xFFu);
        br.consume(l);
      }
      const uint64_t used_bits = br.consumed();
      VQ_CHECK(used_bits <= 8 * payload, FormatError, "Huffman payload is truncated: decoding ", n,
               " symbols needs ", used_bits, " bits but only ", 8 * payload, " are stored");
      VQ_CHECK((used_bits + 7) / 8 == payload, FormatError, "Huffman payload: ", payload,
               " bytes stored but the ", n, " symbols use only ", (used_bits + 7) / 8);
      const int pad = static_cast<int>(8 * payload - used_bits);
      VQ_CHECK(pad == 0 || br.get(pad) == 0, FormatError, "Huffman payload: nonzero padding bits");
      in.skip(static_cast<size_t>(payload), "Huffman payload");
      return;
    }
    case StreamMode::Range:
      range_.decode_body(in, out, n, width);
      return;
  }
  VQ_THROW(FormatError, "entropy stream: unknown mode ", int(mode));
}

}  // namespace vq::coding

#include "coding/range_coder.hpp"

#include <algorithm>
#include <cassert>

#include "veloxquant/errors.hpp"

namespace vq::coding {

namespace {

constexpr uint32_t kTop = 1u << 24;  // renormalize while range < kTop

// One segment's adaptive frequency model over A = 2^width symbols. Counts are kept per symbol and
// per group of 16 symbols, so a cumulative count or a search costs at most 16 + 16 additions.
// Alphabets of at most 16 symbols (widths 1..4, most streams) also keep every symbol's cumulative
// start in lo[], so a cumulative count is one load and a search is 16 branch-free comparisons;
// the unused lanes hold a value above any count (kPad plus at most kRangeMaxTotal of increments).
struct AdaptiveModel {
  static constexpr uint32_t kPad = 0x7FFFFFFFu;
  uint32_t A = 0;
  uint32_t ngroups = 0;
  uint32_t total = 0;
  bool small = false;
  uint32_t freq[256];
  uint32_t group[16];
  uint32_t lo[16];

  void reset(uint32_t alphabet, const uint64_t* hist, uint64_t hist_total, int prior) {
    A = alphabet;
    small = A <= 16;
    ngroups = (A + 15) / 16;
    std::fill(group, group + ngroups, 0u);
    total = 0;
    const uint64_t w = static_cast<uint64_t>(prior) * kRangeIncrement;
    for (uint32_t s = 0; s < A; ++s) {
      uint32_t f = 1;
      if (w > 0 && hist_total > 0) f += static_cast<uint32_t>(hist[s] * w / hist_total);
      freq[s] = f;
      group[s >> 4] += f;
      total += f;
    }
    // total <= 256 + kRangeMaxPrior * kRangeIncrement, far below kRangeMaxTotal.
    assert(total <= kRangeMaxTotal);
    if (small) fill_lo();
  }

  void fill_lo() {
    uint32_t c = 0;
    for (uint32_t s = 0; s < 16; ++s) {
      lo[s] = s < A ? c : kPad;
      if (s < A) c += freq[s];
    }
  }

  void update(uint32_t s) {
    freq[s] += kRangeIncrement;
    group[s >> 4] += kRangeIncrement;
    total += kRangeIncrement;
    if (small)
      for (uint32_t i = 0; i < 16; ++i) lo[i] += i > s ? kRangeIncrement : 0u;
    if (total > kRangeMaxTotal) rescale();
  }

  void rescale() {
    std::fill(group, group + ngroups, 0u);
    total = 0;
    for (uint32_t s = 0; s < A; ++s) {
      freq[s] = (freq[s] + 1) >> 1;
      group[s >> 4] += freq[s];
      total += freq[s];
    }
    if (small) fill_lo();
  }

  uint32_t cum(uint32_t s) const {
    if (small) return lo[s];
    uint32_t c = 0;
    const uint32_t g = s >> 4;
    for (uint32_t i = 0; i < g; ++i) c += group[i];
    for (uint32_t i = g << 4; i < s; ++i) c += freq[i];
    return c;
  }

  /// The symbol whose interval holds v (v < total), and its cumulative count.
  uint32_t find(uint32_t v, uint32_t& c) const {
    if (small) {
      uint32_t s = 0;
      for (uint32_t i = 1; i < 16; ++i) s += lo[i] <= v ? 1u : 0u;
      c = lo[s];
      return s;
    }
    c = 0;
    uint32_t g = 0;
    while (c + group[g] <= v) c += group[g++];
    uint32_t s = g << 4;
    while (c + freq[s] <= v) c += freq[s++];
    return s;
  }
};

// Carry-propagating range encoder writing into a byte vector it owns.
class Encoder {
 public:
  explicit Encoder(std::vector<uint8_t>& out) : out_(out) { out_.clear(); }

  void encode(uint32_t cum, uint32_t f, uint32_t total) {
    const uint32_t r = range_ / total;
    low_ += static_cast<uint64_t>(r) * cum;
    range_ = r * f;
    if (low_ >> 32) carry();
    while (range_ < kTop) {
      out_.push_back(static_cast<uint8_t>(low_ >> 24));
      low_ = (low_ << 8) & 0xFFFFFFFFu;
      range_ <<= 8;
    }
  }

  /// Write the shortest tail that identifies the final interval, then drop trailing zero bytes.
  void finish() {
    const uint64_t hi = low_ + range_;  // exclusive
    uint64_t v = low_;
    for (int k = 32; k >= 0; --k) {
      const uint64_t mask = (uint64_t{1} << k) - 1;
      const uint64_t c = (low_ + mask) & ~mask;
      if (c < hi) {
        v = c;
        break;
      }
    }
    low_ = v;
    if (low_ >> 32) carry();
    for (int i = 0; i < 4; ++i) {
      out_.push_back(static_cast<uint8_t>(low_ >> 24));
      low_ = (low_ << 8) & 0xFFFFFFFFu;
    }
    while (!out_.empty() && out_.back() == 0) out_.pop_back();
  }

 private:
  void carry() {
    low_ &= 0xFFFFFFFFu;
    // The coded interval never leaves [0, 1), so a carry always stops inside the output.
    size_t i = out_.size();
    assert(i > 0);
    while (i > 0 && out_[i - 1] == 0xFF) out_[--i] = 0;
    assert(i > 0);
    if (i > 0) ++out_[i - 1];
  }

  std::vector<uint8_t>& out_;
  uint64_t low_ = 0;
  uint32_t range_ = 0xFFFFFFFFu;
};

[[noreturn]] __attribute__((noinline, cold)) void throw_outside(size_t at, uint32_t v,
                                                                uint32_t total) {
  VQ_THROW(FormatError, "range stream: code value at symbol ", at, " maps to count ", v,
           ", outside the model's total ", total, " (no symbol of the alphabet there)");
}

}  // namespace

void RangeStreamEncoder::check_args(const uint8_t* symbols, size_t n, int width,
                                    size_t segment) const {
  VQ_CHECK(width >= 1 && width <= 8, InvalidArgument, "range encode: width = ", width,
           " is out of range; allowed [1, 8]");
  VQ_CHECK(n >= 1, InvalidArgument, "range encode: count 0 (mode 4 needs at least one symbol)");
  VQ_CHECK(segment >= 1 && segment <= n && n % segment == 0, InvalidArgument,
           "range encode: segment length ", segment, " must be in [1, ", n,
           "] and divide the count ", n);
  uint8_t mx = 0;
  for (size_t i = 0; i < n; ++i) mx = std::max(mx, symbols[i]);
  VQ_CHECK(mx < (1u << width), InvalidArgument, "range encode: symbol ", int(mx),
           " does not fit in width ", width);
}

void RangeStreamEncoder::code_payload(const uint8_t* symbols, size_t n, int width, size_t segment,
                                      int prior) {
  const uint32_t A = 1u << width;
  uint64_t hist[256] = {};
  AdaptiveModel m;
  Encoder enc(payload_);
  payload_.reserve(n * static_cast<size_t>(width) / 8 + 16);
  for (size_t start = 0; start < n; start += segment) {
    m.reset(A, hist, static_cast<uint64_t>(start), prior);
    const uint8_t* seg = symbols + start;
    for (size_t i = 0; i < segment; ++i) {
      const uint32_t s = seg[i];
      enc.encode(m.cum(s), m.freq[s], m.total);
      m.update(s);
    }
    if (prior > 0)
      for (size_t i = 0; i < segment; ++i) ++hist[seg[i]];
  }
  enc.finish();
}

RangeStreamSize RangeStreamEncoder::encode_with_prior(const uint8_t* symbols, size_t n, int width,
                                                      size_t segment, int prior,
                                                      std::vector<uint8_t>& out) {
  check_args(symbols, n, width, segment);
  VQ_CHECK(prior >= 0 && prior <= kRangeMaxPrior, InvalidArgument, "range encode: prior weight ",
           prior, " is out of range; allowed [0, ", kRangeMaxPrior, "]");
  code_payload(symbols, n, width, segment, prior);
  RangeStreamSize sz;
  const size_t start = out.size();
  put_u8(out, kRangeStreamMode);
  put_varint(out, n);
  put_varint(out, segment);
  put_u8(out, static_cast<uint8_t>(prior));
  put_varint(out, payload_.size());
  sz.overhead = static_cast<int64_t>(out.size() - start);
  sz.payload = static_cast<int64_t>(payload_.size());
  out.insert(out.end(), payload_.begin(), payload_.end());
  return sz;
}

RangeStreamSize RangeStreamEncoder::encode(const uint8_t* symbols, size_t n, int width,
                                           size_t segment, std::vector<uint8_t>& out) {
  return encode_with_prior(symbols, n, width, segment, kRangeDefaultPrior, out);
}

void RangeStreamDecoder::decode_body(ByteReader& in, uint8_t* out, size_t n, int width) {
  VQ_CHECK(width >= 1 && width <= 8, InvalidArgument, "range decode: width = ", width,
           " is out of range; allowed [1, 8]");
  VQ_CHECK(n >= 1, FormatError, "range stream: mode 4 with count 0");
  const uint64_t segment = in.varint("range stream segment length", n);
  VQ_CHECK(segment >= 1, FormatError, "range stream: segment length 0");
  VQ_CHECK(n % segment == 0, FormatError, "range stream: segment length ", segment,
           " does not divide the count ", n);
  const int prior = in.u8("range stream prior weight");
  VQ_CHECK(prior <= kRangeMaxPrior, FormatError, "range stream: prior weight ", prior,
           " exceeds the limit ", kRangeMaxPrior);
  const uint64_t payload = in.varint("range stream payload size", UINT64_MAX);
  in.need(static_cast<size_t>(std::min<uint64_t>(payload, SIZE_MAX)), "range stream payload");
  VQ_CHECK(payload == 0 || in.cursor()[payload - 1] != 0, FormatError, "range stream: payload of ",
           payload, " bytes ends in a zero byte (not canonical)");

  const uint8_t* p = in.cursor();
  const uint8_t* const end = p + payload;
  uint64_t consumed = 0;  // bytes the decoder has taken (past the end they read as zero)
  auto next = [&]() -> uint32_t {
    ++consumed;
    return p < end ? *p++ : 0u;
  };
  uint32_t code = 0;
  for (int i = 0; i < 4; ++i) code = (code << 8) | next();
  uint32_t range = 0xFFFFFFFFu;

  const uint32_t A = 1u << width;
  uint64_t hist[256] = {};
  AdaptiveModel m;
  const size_t seg = static_cast<size_t>(segment);
  for (size_t start = 0; start < n; start += seg) {
    m.reset(A, hist, static_cast<uint64_t>(start), prior);
    for (size_t i = start; i < start + seg; ++i) {
      const uint32_t r = range / m.total;
      const uint32_t v = code / r;
      if (__builtin_expect(v >= m.total, 0)) throw_outside(i, v, m.total);
      uint32_t c;
      const uint32_t s = m.find(v, c);
      out[i] = static_cast<uint8_t>(s);
      code -= r * c;
      range = r * m.freq[s];
      while (range < kTop) {
        code = (code << 8) | next();
        range <<= 8;
      }
      m.update(s);
    }
    if (prior > 0)
      for (size_t i = start; i < start + seg; ++i) ++hist[out[i]];
  }
  VQ_CHECK(payload <= consumed, FormatError, "range stream: payload of ", payload,
           " bytes but decoding the ", n, " symbols reads only ", consumed);
  in.skip(static_cast<size_t>(payload), "range stream payload");
}

}  // namespace vq::coding

// Byte and bit I/O for the coded formats.
//
// Byte level: little-endian fixed-width integers and fp32, and unsigned LEB128 varints (7 bits per
// byte, least significant group first, high bit = "more bytes follow", at most 10 bytes).
// Bit level: MSB-first. The first bit written becomes the most significant bit of the first byte;
// a code of length L is written from its most significant bit down. The last byte is padded with
// zero bits.
//
// Readers never trust their input: every read is bounds-checked and throws vq::FormatError naming
// `what` (the structure being read) on truncation or overflow.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "veloxquant/errors.hpp"

namespace vq::coding {

// ---------------------------------------------------------------------------------------------
// Byte writer / reader

inline void put_u8(std::vector<uint8_t>& out, uint8_t v) {
  out.push_back(v);
}

inline void put_varint(std::vector<uint8_t>& out, uint64_t v) {
  while (v >= 0x80u) {
    out.push_back(static_cast<uint8_t>(v | 0x80u));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}

/// Bytes put_varint(v) writes.
inline int64_t varint_size(uint64_t v) {
  int64_t n = 1;
  while (v >= 0x80u) {
    v >>= 7;
    ++n;
  }
  return n;
}

inline void put_u16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v & 0xFFu));
  out.push_back(static_cast<uint8_t>(v >> 8));
}

/// Append n floats as little-endian IEEE binary32.
inline void put_f32(std::vector<uint8_t>& out, const float* v, size_t n) {
  const size_t at = out.size();
  out.resize(at + 4 * n);
  uint8_t* p = out.data() + at;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    p[4 * i + 0] = static_cast<uint8_t>(bits);
    p[4 * i + 1] = static_cast<uint8_t>(bits >> 8);
    p[4 * i + 2] = static_cast<uint8_t>(bits >> 16);
    p[4 * i + 3] = static_cast<uint8_t>(bits >> 24);
  }
}

/// Bounds-checked reader over [data, data + size), starting at `pos`.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size, size_t pos = 0)
      : data_(data), size_(size), pos_(pos) {
    VQ_CHECK(pos <= size, FormatError, "byte reader: start offset ", pos, " is past the end (",
             size, " bytes)");
  }

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  bool at_end() const { return pos_ == size_; }
  const uint8_t* cursor() const { return data_ + pos_; }

  /// Throw unless n more bytes are present.
  void need(size_t n, const char* what) const {
    VQ_CHECK(n <= remaining(), FormatError, what, ": needs ", n, " bytes at offset ", pos_,
             " but only ", remaining(), " remain (truncated)");
  }
  void skip(size_t n, const char* what) {
    need(n, what);
    pos_ += n;
  }
  uint8_t u8(const char* what) {
    need(1, what);
    return data_[pos_++];
  }
  uint16_t u16(const char* what) {
    need(2, what);
    const uint16_t v = static_cast<uint16_t>(data_[pos_] | (data_[pos_ + 1] << 8));
    pos_ += 2;
    return v;
  }
  /// A varint whose value must be <= max_value.
  uint64_t varint(const char* what, uint64_t max_value) {
    uint64_t v = 0;
    for (int i = 0; i < 10; ++i) {
      need(1, what);
      const uint8_t b = data_[pos_++];
      const uint64_t group = b & 0x7Fu;
      VQ_CHECK(i < 9 || group <= 1, FormatError, what, ": varint overflows 64 bits");
      v |= group << (7 * i);
      if ((b & 0x80u) == 0) {
        VQ_CHECK(v <= max_value, FormatError, what, " = ", v, " exceeds its limit ", max_value);
        return v;
      }
    }
    VQ_THROW(FormatError, what, ": varint longer than 10 bytes");
  }
  /// n little-endian floats; every value must be finite.
  void f32(float* out, size_t n, const char* what) {
    VQ_CHECK(n <= remaining() / 4, FormatError, what, ": needs ", n, " floats (", 4 * n,
             " bytes) at offset ", pos_, " but only ", remaining(), " bytes remain (truncated)");
    const uint8_t* p = data_ + pos_;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t bits =
          static_cast<uint32_t>(p[4 * i]) | (static_cast<uint32_t>(p[4 * i + 1]) << 8) |
          (static_cast<uint32_t>(p[4 * i + 2]) << 16) | (static_cast<uint32_t>(p[4 * i + 3]) << 24);
      VQ_CHECK((bits & 0x7F800000u) != 0x7F800000u, FormatError, what, ": value ", i,
               " is NaN or Inf");
      std::memcpy(&out[i], &bits, 4);
    }
    pos_ += 4 * n;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_;
};

// ---------------------------------------------------------------------------------------------
// Bit writer / reader (MSB-first)

/// Appends bits to a byte vector, MSB-first. Call finish() once to flush the padded last byte.
class BitWriter {
 public:
  explicit BitWriter(std::vector<uint8_t>& out) : out_(out) {}
  /// Write the low `len` bits of `code` (len <= 32), most significant first.
  void put(uint32_t code, int len) {
    acc_ = (acc_ << len) | code;
    nbits_ += len;
    while (nbits_ >= 8) {
      nbits_ -= 8;
      out_.push_back(static_cast<uint8_t>(acc_ >> nbits_));
    }
  }
  /// Flush the partial byte (zero-padded).
  void finish() {
    if (nbits_ > 0) {
      out_.push_back(static_cast<uint8_t>(acc_ << (8 - nbits_)));
      nbits_ = 0;
    }
  }

 private:
  std::vector<uint8_t>& out_;
  uint64_t acc_ = 0;
  int nbits_ = 0;  // pending bits in acc_ (< 8 between calls)
};

/// Reads MSB-first bits from [data, data + size). Reading past the end yields zero bits and is
/// detected afterwards with overrun() (the decoders check it), so the hot loop needs no branch
/// per byte and never touches memory outside the buffer.
class BitReader {
 public:
  BitReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) { refill(); }

  /// The next `k` bits (1 <= k <= 32) without consuming them.
  uint32_t peek(int k) const { return static_cast<uint32_t>(buf_ >> (64 - k)); }
  /// Consume `len` bits (len <= 32); refills so that at least 32 bits are buffered again.
  void consume(int len) {
    buf_ <<= len;
    have_ -= len;
    consumed_ += static_cast<uint64_t>(len);
    if (have_ < 32) refill();
  }
  uint32_t get(int len) {
    const uint32_t v = peek(len);
    consume(len);
    return v;
  }
  /// Bits consumed so far.
  uint64_t consumed() const { return consumed_; }

 private:
  void refill() {
    if (end_ - p_ >= 8) {
      // Fast path: OR the next 8 bytes in below the valid bits and advance by the whole bytes
      // that fit. Bits of a byte only partly taken are already at their final place, so OR-ing
      // that byte again on the next refill changes nothing.
      uint64_t w = 0;
      for (int i = 0; i < 8; ++i) w = (w << 8) | p_[i];
      buf_ |= w >> have_;
      const int take = (64 - have_) >> 3;
      p_ += take;
      have_ += 8 * take;
      return;
    }
    while (have_ <= 56) {
      const uint64_t byte = p_ < end_ ? *p_++ : 0u;  // virtual zero padding past the end
      buf_ |= byte << (56 - have_);
      have_ += 8;
    }
  }
  const uint8_t* p_;
  const uint8_t* end_;
  uint64_t buf_ = 0;
  int have_ = 0;  // valid bits at the top of buf_
  uint64_t consumed_ = 0;
};

}  // namespace vq::coding

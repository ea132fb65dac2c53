// Fixed-width bit packing of small integer codes, the layout every resident codec row uses.
//
// Code i takes the next w_i bits of the row, least significant bit first: bit p of the packed
// run is bit (p % 8) of byte p / 8. A run of codes whose widths sum to T bits takes exactly
// ceil(T / 8) bytes; the unused high bits of the last byte are written as zero, and the
// readers never touch a byte past ceil(T / 8).
#pragma once

#include <cstdint>

namespace vq::codecs {

/// Bytes a run of `bits` packed bits takes.
inline int64_t packed_bytes(int64_t bits) {
  return (bits + 7) / 8;
}

/// Pack codes[0:n) (each < 2^width, width in [1, 8]) into packed_bytes(n * width) bytes.
inline void pack_fixed(const uint8_t* codes, int64_t n, int width, uint8_t* out) {
  uint64_t acc = 0;
  int have = 0;
  for (int64_t i = 0; i < n; ++i) {
    acc |= static_cast<uint64_t>(codes[i]) << have;
    have += width;
    while (have >= 8) {
      *out++ = static_cast<uint8_t>(acc);
      acc >>= 8;
      have -= 8;
    }
  }
  if (have > 0) *out = static_cast<uint8_t>(acc);
}

/// Inverse of pack_fixed: n codes of `width` bits from packed_bytes(n * width) bytes.
inline void unpack_fixed(const uint8_t* in, int64_t n, int width, uint8_t* codes) {
  if (width == 8) {
    for (int64_t i = 0; i < n; ++i) codes[i] = in[i];
    return;
  }
  if (width == 4) {
    for (int64_t i = 0; i + 1 < n; i += 2) {
      codes[i] = in[i / 2] & 0x0Fu;
      codes[i + 1] = in[i / 2] >> 4;
    }
    if (n & 1) codes[n - 1] = in[n / 2] & 0x0Fu;
    return;
  }
  if (width == 2 || width == 1) {
    const int per = 8 / width;
    const uint8_t mask = static_cast<uint8_t>((1u << width) - 1u);
    for (int64_t i = 0; i < n; ++i)
      codes[i] = static_cast<uint8_t>((in[i / per] >> ((i % per) * width)) & mask);
    return;
  }
  const uint64_t mask = (uint64_t{1} << width) - 1u;
  uint64_t acc = 0;
  int have = 0;
  for (int64_t i = 0; i < n; ++i) {
    while (have < width) {
      acc |= static_cast<uint64_t>(*in++) << have;
      have += 8;
    }
    codes[i] = static_cast<uint8_t>(acc & mask);
    acc >>= width;
    have -= width;
  }
}

/// Pack codes[0:n) where code i has widths[i] bits (each in [1, 8]).
inline void pack_var(const uint8_t* codes, const uint8_t* widths, int64_t n, uint8_t* out) {
  uint64_t acc = 0;
  int have = 0;
  for (int64_t i = 0; i < n; ++i) {
    acc |= static_cast<uint64_t>(codes[i]) << have;
    have += widths[i];
    while (have >= 8) {
      *out++ = static_cast<uint8_t>(acc);
      acc >>= 8;
      have -= 8;
    }
  }
  if (have > 0) *out = static_cast<uint8_t>(acc);
}

/// Inverse of pack_var.
inline void unpack_var(const uint8_t* in, const uint8_t* widths, int64_t n, uint8_t* codes) {
  uint64_t acc = 0;
  int have = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int w = widths[i];
    while (have < w) {
      acc |= static_cast<uint64_t>(*in++) << have;
      have += 8;
    }
    codes[i] = static_cast<uint8_t>(acc & ((uint64_t{1} << w) - 1u));
    acc >>= w;
    have -= w;
  }
}

}  // namespace vq::codecs

// Internals of the .npy reader, exposed for tests: the header-dict parser and the size checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "veloxquant/npy.hpp"

namespace vq::npy {

/// The most dimensions a .npy may have (NumPy's own limit is 32 on older releases).
constexpr size_t kMaxRank = 32;
/// Header dicts longer than this are refused (NumPy writes a few hundred bytes).
constexpr size_t kMaxHeaderBytes = size_t{1} << 20;

/// What the header dict says.
struct Header {
  NpyDtype dtype = NpyDtype::Float32;
  std::vector<int64_t> shape;
  bool fortran_order = false;
};

/// Parse the header dict text, e.g. "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
/// followed by padding and '\n'. Throws FormatError naming what is wrong.
Header parse_header(std::string_view text, const NpyReadOptions& opts);

/// Map a descr string to a dtype; throws FormatError for unsupported or big-endian descr.
NpyDtype dtype_from_descr(std::string_view descr, const NpyReadOptions& opts);

/// Bytes of data the shape implies, with overflow checks (throws FormatError when the product of
/// the dimensions times the element size does not fit in 63 bits).
uint64_t data_bytes(const Header& h);

/// Layout of the fixed prefix: magic (6 bytes), major, minor, then the header length in 2 bytes
/// (version 1) or 4 bytes (versions 2 and 3).
struct Prefix {
  int major = 0, minor = 0;
  size_t prefix_bytes = 0;  ///< 10 or 12
  uint64_t header_len = 0;
};
/// Decode the prefix. `total` is the size of the whole file; `p` holds its first min(total, 12)
/// bytes. Checks the magic, the version and that the header fits in the file.
Prefix parse_prefix(const uint8_t* p, uint64_t total);

}  // namespace vq::npy

// Internals of the .vqkv container (docs/format.md), exposed for tests that craft damaged files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "coding/checksum.hpp"
#include "veloxquant/vqkv.hpp"

namespace vq::vqkv {

/// "\x89VQKV\r\n\x1a": a non-ASCII first byte and CR LF / Ctrl-Z catch text-mode transfers.
constexpr uint8_t kMagic[8] = {0x89, 'V', 'Q', 'K', 'V', 0x0D, 0x0A, 0x1A};
/// Fixed part of the header (magic .. n_sections), before the spec string.
constexpr size_t kFixedHeaderBytes = 48;
/// One section-table entry.
constexpr size_t kEntryBytes = 32;
/// The header checksum that follows the table.
constexpr size_t kChecksumBytes = 8;
/// Longest method spec accepted.
constexpr uint32_t kMaxSpecBytes = 65536;
/// Shape limits (inclusive).
constexpr int64_t kMaxLayers = int64_t{1} << 20;
constexpr int64_t kMaxHeads = int64_t{1} << 20;
constexpr int64_t kMaxHeadDim = 65536;
constexpr int64_t kMaxTokens = int64_t{1} << 40;
/// Section-table head value meaning "every head".
constexpr uint32_t kAllHeads = 0xFFFFFFFFu;

/// Field offsets inside the fixed header.
enum FieldOffset : size_t {
  kOffVersion = 8,
  kOffFlags = 10,
  kOffSpecLen = 12,
  kOffLayout = 16,
  kOffDtype = 17,
  kOffReserved = 18,
  kOffL = 20,
  kOffH = 24,
  kOffD = 28,
  kOffS = 32,
  kOffNSections = 40,
};

/// XXH64 with seed 0 (the checksum of every section and of the header).
using coding::xxh64;

/// Byte offset of the header checksum (= end of the section table) in a file with this spec
/// length and section count.
inline uint64_t checksum_offset(uint64_t spec_len, uint64_t n_sections) {
  return kFixedHeaderBytes + spec_len + kEntryBytes * n_sections;
}

/// The position of flat index i in a C-order array of `shape`, as "[a, b, c]".
std::string index_str(int64_t i, const std::vector<int64_t>& shape);

}  // namespace vq::vqkv

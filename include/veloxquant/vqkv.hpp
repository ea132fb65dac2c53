// The .vqkv stored format: a KV cache (or any [.., S, D] array) compressed by a transform-family
// method, with its method spec, shapes, one checksummed section per (layer, K/V, head) and enough
// header to decode it anywhere. The byte layout is specified in docs/format.md.
//
//   std::vector<uint8_t> file = vqkv_compress(read_npy("kv.npy"), "kvtc:bit_budget=128");
//   VqkvArray back = vqkv_decompress(file.data(), file.size());   // same shape, fp32 values
//
// Readers trust nothing: every size is checked against the bytes present and for overflow before
// anything is allocated, every checksum is verified, and any damage throws vq::FormatError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "veloxquant/codec.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/npy.hpp"

namespace vq {

/// Format version written by this library (the u16 after the magic). Version 2 stores q8_0 /
/// q4_0 per head (blocks inside a head, as the cache holds them); version 1 files, whose q8_0 /
/// q4_0 blocks ran along a token's row of all heads, are still read. Others are refused.
constexpr uint16_t kVqkvVersion = 2;
constexpr uint16_t kVqkvOldestVersion = 1;

/// How the stored array is arranged. Stored as a u8; values are never reused.
enum class VqkvLayout : uint8_t {
  SD = 1,     ///< [S, D]: one head of one tensor
  HSD = 2,    ///< [H, S, D]: one layer of one tensor
  LHSD = 3,   ///< [L, H, S, D]: every layer of one tensor
  L2HSD = 4,  ///< [L, 2, H, S, D]: every layer, keys (index 0) and values (index 1)
};
const char* vqkv_layout_name(VqkvLayout l);

/// What a section holds. Stored as a u8; values are never reused.
enum class VqkvKind : uint8_t {
  Tensor = 0,  ///< the single tensor of an SD / HSD / LHSD file
  Keys = 1,    ///< keys of an L2HSD file
  Values = 2,  ///< values of an L2HSD file
};
const char* vqkv_kind_name(VqkvKind k);

struct VqkvHeader {
  uint16_t version = kVqkvVersion;
  VqkvLayout layout = VqkvLayout::HSD;
  NpyDtype source_dtype = NpyDtype::Float32;  ///< Float32, Float16 or BFloat16: what was given
  int64_t L = 1, H = 1, S = 0, D = 1;
  std::string
      spec;  ///< the method spec with every option spelled out (CacheConfig::to_string(true))

  /// 1, or 2 for L2HSD.
  int64_t n_kinds() const;
  /// The original array shape ([S, D], [H, S, D], [L, H, S, D] or [L, 2, H, S, D]).
  std::vector<int64_t> shape() const;
  /// L * n_kinds * H * S * D.
  int64_t numel() const;
};

struct VqkvSection {
  int64_t layer = 0;
  VqkvKind kind = VqkvKind::Tensor;
  int64_t head = -1;      ///< -1 = every head (heads-coupled methods such as q8_0)
  uint64_t offset = 0;    ///< from the start of the file
  uint64_t size = 0;      ///< bytes
  uint64_t checksum = 0;  ///< XXH64 (seed 0) of the section's bytes
};

/// A parsed and verified file: the header and the section index. Payload bytes stay in the
/// caller's buffer (sections point into it by offset).
struct VqkvIndex {
  VqkvHeader header;
  std::vector<VqkvSection> sections;  ///< in file order
  uint64_t file_bytes = 0;
  uint64_t header_bytes = 0;  ///< everything before the first section: preamble, header, table
};

/// Byte totals of a compression run.
struct VqkvStats {
  int64_t file_bytes = 0;         ///< the whole .vqkv
  int64_t section_bytes = 0;      ///< sum of section sizes
  int64_t pre_entropy_bytes = 0;  ///< sections as fixed-width codes (no entropy coding)
  int64_t source_bytes = 0;       ///< numel * sizeof(source dtype)
  int64_t fp16_bytes = 0;         ///< numel * 2
  ByteBreakdown breakdown;        ///< over every section
  /// fp16_bytes / file_bytes (the header and table counted).
  double compression_ratio() const;
};

struct VqkvReadOptions {
  /// Refuse files that would decode to more values than this (a crafted header could otherwise
  /// ask for an arbitrary allocation). 2^32 fp32 values = 16 GiB.
  int64_t max_values = int64_t{1} << 32;
  /// Decompression-bomb bound: above `free_values` decoded values, refuse a file that declares
  /// more than max_values_per_byte values per byte it holds. No file this library writes comes
  /// near it except kvtc with (almost) every component dropped over very long chunks.
  int64_t free_values = int64_t{1} << 26;
  int64_t max_values_per_byte = int64_t{1} << 16;
  /// Verify every section checksum (parse always verifies the header checksum).
  bool verify_sections = true;
};

/// The decoded array: values in fp32, the original shape and the dtype it was given in.
struct VqkvArray {
  VqkvHeader header;
  std::vector<int64_t> shape;
  std::vector<float> values;  ///< numel floats, C order
  /// The values as an .npy array of the source dtype (fp16/bf16 rounded to nearest even).
  NpyArray to_npy() const;
};

/// Called after each (layer, kind) block is encoded with (blocks done, blocks in total).
using VqkvProgress = std::function<void(int64_t done, int64_t total)>;

/// The values a codec can store: |x| <= max_abs (fp16 fields bound kivi, gear, svdq kind=v and
/// the llama.cpp block scales; the PCA family stops at 1e30), with the reason in words.
struct CodecRange {
  double max_abs = 0;
  const char* why = "";
};
namespace vqkv {
CodecRange codec_value_range(const CacheConfig& config);
}  // namespace vqkv

/// Compress `data` (numel(shape) finite floats, C order) with a transform-family method.
/// shape: [S, D], [H, S, D], [L, H, S, D] or [L, 2, H, S, D]; D must be >= 1, H >= 1, L >= 1.
/// source_dtype records what the caller's array was (Float32, Float16 or BFloat16; Float64 is
/// recorded as Float32). The same input gives the same bytes. Throws InvalidArgument for a bad
/// shape, a non-transform method, NaN/Inf values or a value outside codec_value_range() (the
/// message names the value, its index in `shape` and the range), so that every file written
/// decodes.
std::vector<uint8_t> vqkv_compress(const float* data, const std::vector<int64_t>& shape,
                                   const CacheConfig& config,
                                   NpyDtype source_dtype = NpyDtype::Float32,
                                   VqkvStats* stats = nullptr,
                                   const VqkvProgress& progress = nullptr);
/// Same, from an .npy array (float kinds) and a spec string.
std::vector<uint8_t> vqkv_compress(const NpyArray& array, const std::string& spec,
                                   VqkvStats* stats = nullptr);

/// Parse and verify the header, the section table and (by default) every section checksum.
/// Throws FormatError for anything malformed: bad magic, unknown version, unknown enum values,
/// non-zero reserved fields, sizes that overflow or disagree with the file size, a checksum
/// mismatch, or a method this build does not know.
VqkvIndex vqkv_parse(const uint8_t* data, size_t size, const VqkvReadOptions& opts = {});

/// Parse, verify and decode every section.
VqkvArray vqkv_decompress(const uint8_t* data, size_t size, const VqkvReadOptions& opts = {});

/// Whole-file helpers. Throw IoError when the file cannot be read or written. write_file_bytes
/// is atomic: it writes a temporary file in the target's directory and renames it over `path`,
/// so a failure leaves no partial file (and an existing file stays as it was).
std::vector<uint8_t> read_file_bytes(const std::string& path);
void write_file_bytes(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace vq

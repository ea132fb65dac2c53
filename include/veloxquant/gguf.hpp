// GGUF model files (llama.cpp's format, versions 2 and 3, little-endian), memory-mapped or read
// into memory (FileLoad, veloxquant/mapped_file.hpp).
//
// Layout: magic "GGUF", uint32 version, uint64 tensor count, uint64 metadata count, the metadata
// key/values, the tensor infos, padding to `general.alignment` (default 32), then the tensor data.
// open() checks everything before anything is used: every count and string length against the
// bytes left, every value type, each tensor's rank (1..4), dims (>= 1, product < 2^62, first dim
// a multiple of the type's block), type (see ggml_type_supported), offset (aligned, in the data
// region, no two tensors overlapping) and unique names. Each refusal is a FormatError that names
// the field or tensor, the value and the limit.
//
// Tensor dims are given in ggml order: dims[0] is the contiguous (innermost) axis. A 2-D weight
// [n_out, n_in] in PyTorch terms is dims = {n_in, n_out} here: n_out rows of n_in values.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "veloxquant/mapped_file.hpp"

namespace vq {

// ------------------------------------------------------------------------------------------------
// ggml tensor types

/// ggml's type ids (the numbers stored in GGUF files). Only the ones listed in
/// ggml_type_supported() can be read; the others are named in errors.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
};

/// "F32", "Q4_K", ... or "type#N" for an id ggml does not define.
std::string ggml_type_name(uint32_t type);
/// True for the types this reader dequantizes: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K
/// Q6_K.
bool ggml_type_supported(uint32_t type);
/// "F32, F16, BF16, ..." (for error messages).
std::string ggml_supported_types_list();
/// Values per block (1 for float types, 32 for Q*_0/Q*_1, 256 for K-quants). Throws
/// InvalidArgument for an unsupported type.
int64_t ggml_block_values(GgmlType t);
/// Bytes per block.
int64_t ggml_block_bytes(GgmlType t);
/// Bytes `n` values take; `n` must be a multiple of the block (InvalidArgument otherwise, or when
/// the result would overflow).
uint64_t ggml_row_bytes(GgmlType t, int64_t n);
/// Decode `n` values (a multiple of the block) stored as `t` at `src` into `dst`. Scalar code
/// straight from the block layouts (see src/formats/ggml_types.cpp). Any bit pattern decodes.
void ggml_dequantize(GgmlType t, const uint8_t* src, float* dst, int64_t n);
/// The types ggml_quantize writes: F32, F16, BF16, Q8_0, Q4_K.
bool ggml_type_quantizable(GgmlType t);
/// Encode `n` fp32 values (a multiple of the block) as `t` into ggml_row_bytes(t, n) bytes at
/// `dst` (src/formats/ggml_quantize.cpp): F16 / BF16 round to nearest even, Q8_0 as
/// coding/ggml_blocks, Q4_K with a plain min/max fit per 32-value sub-block (no search).
/// ggml_dequantize reads the bytes back. InvalidArgument for another type or a partial block.
void ggml_quantize(GgmlType t, const float* src, uint8_t* dst, int64_t n);

// ------------------------------------------------------------------------------------------------
// Metadata values

enum class GgufValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
/// "uint8", ..., "array", or "type#N".
std::string gguf_value_type_name(uint32_t t);

/// One metadata value. Scalars keep their exact value in `u` (unsigned), `i` (signed) or `f`
/// (floating) according to their type; BOOL is stored in `u` (0/1); STRING in `str`. An ARRAY has
/// `elem_type` and `count`; arrays of strings or of arrays (nested up to 8 levels) hold their
/// elements in `arr`, arrays of numbers / bools stay in the file (`raw`, valid while the GgufFile
/// lives) and are decoded by the as_*_array accessors, so a large numeric array costs no memory.
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  std::string str;
  GgufValueType elem_type = GgufValueType::UINT8;
  uint64_t count = 0;            ///< ARRAY: number of elements
  std::vector<GgufValue> arr;    ///< ARRAY of STRING / ARRAY
  const uint8_t* raw = nullptr;  ///< ARRAY of numbers / bools: the packed little-endian elements

  /// Element k of an array (decoded for numeric arrays). InvalidArgument when out of range.
  GgufValue element(uint64_t k) const;

  bool is_integer() const;
  bool is_float() const { return type == GgufValueType::FLOAT32 || type == GgufValueType::FLOAT64; }
  /// Checked conversions: throw FormatError naming `key` when the type does not fit or the value
  /// is out of range.
  int64_t as_int(const std::string& key) const;
  double as_float(const std::string& key) const;  // integers convert too
  bool as_bool(const std::string& key) const;
  const std::string& as_string(const std::string& key) const;
  std::vector<std::string> as_string_array(const std::string& key) const;
  std::vector<float> as_float_array(const std::string& key) const;
  std::vector<int64_t> as_int_array(const std::string& key) const;
  /// A short human-readable rendering ("[32000 strings]" for big arrays).
  std::string describe() const;
};

// ------------------------------------------------------------------------------------------------
// The file

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> dims;  ///< ggml order: dims[0] contiguous
  uint64_t offset = 0;        ///< from the start of the data region
  uint64_t bytes = 0;         ///< stored size
  int64_t numel() const;
  /// dims reversed (PyTorch / row-major order: last axis contiguous).
  std::vector<int64_t> shape() const { return {dims.rbegin(), dims.rend()}; }
};

class GgufFile {
 public:
  /// Map (or, FileLoad::Copy, read) and validate `path`. Throws IoError / FormatError (message
  /// starts with the path).
  static GgufFile open(const std::string& path, FileLoad how = FileLoad::Map);
  /// Validate bytes already in memory (`file` keeps them alive).
  static GgufFile parse(std::shared_ptr<const MappedFile> file);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  ///< file offset of the data region
  uint64_t file_bytes() const { return file_->size(); }
  const std::string& path() const { return file_->path(); }

  /// Metadata in file order, and lookup by key (nullptr when absent).
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  /// Required value: FormatError naming the key when absent.
  const GgufValue& get(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  /// Convenience: value of `key` or `fallback` when absent (type still checked when present).
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key, double fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  /// general.architecture, or "" when absent.
  std::string architecture() const { return get_string("general.architecture", ""); }

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  /// nullptr when no tensor has this name.
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  /// Required tensor: FormatError naming it when absent.
  const GgufTensorInfo& tensor(const std::string& name) const;
  /// Pointer to the stored bytes of a tensor (inside the map; valid while this object lives).
  const uint8_t* tensor_data(const GgufTensorInfo& t) const;
  /// The whole tensor decoded to fp32 (numel values).
  std::vector<float> dequantize(const GgufTensorInfo& t) const;
  /// Rows [row0, row0 + nrows) of a tensor decoded (a row is dims[0] values).
  void dequantize_rows(const GgufTensorInfo& t, int64_t row0, int64_t nrows, float* out) const;

 private:
  std::shared_ptr<const MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace vq

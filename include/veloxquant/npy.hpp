// NumPy .npy files (format versions 1.0, 2.0 and 3.0), the way most people hold KV caches
// dumped from PyTorch or MLX. Only little-endian, C-order arrays of the dtypes below are read;
// everything else is refused with a FormatError that says what was found and how to convert it.
//
//   NpyArray a = read_npy("keys.npy");            // any supported dtype, any rank
//   std::vector<float> x = a.to_float();          // fp16 / bf16 / fp32 / fp64 widened or narrowed
//   write_npy("out.npy", npy_from_float(x.data(), a.shape, NpyDtype::Float16));
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vq {

/// Element types VeloxQuant reads and writes. The numeric values are stable: they are stored in
/// .vqkv files and returned by the C API, and a value is never reused for another type.
enum class NpyDtype : int {
  Float32 = 1,   ///< '<f4'
  Float16 = 2,   ///< '<f2'
  BFloat16 = 3,  ///< stored as '<u2' (NumPy has no bfloat16); read only when asked for
  Float64 = 4,   ///< '<f8' (read and narrowed to fp32; NumPy's default float)
  Int64 = 5,     ///< '<i8' (kept positions)
  Int32 = 6,     ///< '<i4'
};

/// The descr string written for `t` ("<f4", "<f2", "<u2", "<f8", "<i8", "<i4").
const char* npy_descr(NpyDtype t);
/// A short readable name ("float32", "float16", "bfloat16", ...).
const char* npy_dtype_name(NpyDtype t);
/// Bytes per element.
size_t npy_dtype_size(NpyDtype t);
/// True for the float kinds (Float32, Float16, BFloat16, Float64).
bool npy_is_float(NpyDtype t);

/// An array as stored: the dtype, the shape (C order, any rank up to 32, 0-d allowed) and the raw
/// little-endian element bytes, numel * npy_dtype_size(dtype) of them.
struct NpyArray {
  NpyDtype dtype = NpyDtype::Float32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  /// Product of the shape (1 for a 0-d array).
  int64_t numel() const;
  /// Elements as fp32: fp16/bf16 exactly, fp64 rounded to nearest. Integer arrays throw
  /// InvalidArgument (they are not KV data).
  std::vector<float> to_float() const;
  /// Elements as int64. Float arrays throw InvalidArgument.
  std::vector<int64_t> to_int64() const;
  /// "[2, 4, 128]"
  std::string shape_str() const;
};

struct NpyReadOptions {
  /// Interpret '<u2' arrays as bfloat16 bit patterns (the convention write_npy uses for BFloat16).
  /// When false, '<u2' is an unsupported dtype.
  bool u2_as_bfloat16 = false;
};

/// Read a .npy file. Throws IoError when the file cannot be opened or read, FormatError for a
/// malformed or unsupported file (bad magic or version, header that is not a valid dict,
/// unsupported dtype, big-endian data, Fortran order, a shape whose byte count overflows or does
/// not match the bytes that follow the header). Nothing is allocated before the sizes check out.
NpyArray read_npy(const std::string& path, const NpyReadOptions& opts = {});
/// Same checks, from memory (`size` bytes at `data`).
NpyArray parse_npy(const void* data, size_t size, const NpyReadOptions& opts = {});

/// The complete file image of `a`: version 1.0 (2.0 when the header does not fit 65535 bytes),
/// header padded with spaces to a multiple of 64 bytes and ended by '\n'. Throws InvalidArgument
/// when a.bytes does not hold exactly numel * element size bytes or a dimension is negative.
std::vector<uint8_t> encode_npy(const NpyArray& a);
/// encode_npy() written to `path`. Throws IoError when the file cannot be written.
void write_npy(const std::string& path, const NpyArray& a);

/// Build an array from fp32 values, stored as `dtype` (Float32, Float16 or BFloat16; round to
/// nearest even when narrowing). `shape` must have numel == the number of values at `data`.
NpyArray npy_from_float(const float* data, std::vector<int64_t> shape,
                        NpyDtype dtype = NpyDtype::Float32);
/// Build an int64 array.
NpyArray npy_from_int64(const int64_t* data, std::vector<int64_t> shape);

}  // namespace vq

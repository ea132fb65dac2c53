// A weight matrix as the inference engine reads it: `rows` rows of `cols` values each, stored
// back to back in one ggml type (F32, F16, BF16, or a block quantization such as Q8_0 or Q4_K),
// row r starting at data + r * row_bytes. The bytes are not owned (a memory map, a file's copy
// or a Model's buffer keeps them alive). Kernels over it are in src/kernels/matmul.hpp.
#pragma once

#include <cstdint>

#include "veloxquant/gguf.hpp"

namespace vq {

struct WeightMatrix {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  /// Bytes of one row (cols is a whole number of blocks of `type`).
  uint64_t row_bytes() const { return ggml_row_bytes(type, cols); }
  const uint8_t* row(int64_t r) const { return data + static_cast<uint64_t>(r) * row_bytes(); }
  /// An fp32 matrix over `p` (rows x cols floats, row-major).
  static WeightMatrix f32(const float* p, int64_t rows, int64_t cols) {
    return {GgmlType::F32, reinterpret_cast<const uint8_t*>(p), rows, cols};
  }
};

}  // namespace vq

// `veloxquant bench kernels`: the stored-type matrix kernels (src/kernels) on one weight shape,
// every type against fp32 weights measured in the same run: decode (matrix-vector) and prefill
// (matrix-matrix) time, weight bytes per value, and the scalar _ref twin's time. Random weights
// (valid blocks of each type), no model needed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vq::bench {

struct KernelRow {
  std::string type;            ///< "F32", "Q8_0", ...
  double bits_per_weight = 0;  ///< stored bytes * 8 / values
  double matvec_us = 0;        ///< one y = W x (best of the repeats)
  double matvec_ref_us = 0;    ///< the scalar twin
  double matmul_us = 0;        ///< one Y = X W^T over `batch` rows
  double matvec_vs_f32 = 0;    ///< matvec_us / F32's matvec_us
  double matmul_vs_f32 = 0;
};

struct KernelOptions {
  int64_t rows = 2048, cols = 2048, batch = 64;
  int repeats = 5;
  std::vector<std::string> types;  ///< empty: every supported type
};

std::vector<KernelRow> run_kernel_bench(const KernelOptions& opt);

}  // namespace vq::bench

// The spec's CurDKV benchmark (curdkv.txt, "Benchmark"): class-2 (value-irrelevant) retention of
// CurDKV vs H2O at the same token budget, on two synthetic two-class geometries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "veloxquant/tensor.hpp"

namespace vq::bench {

/// Two-class synthetic head: keys/values [1, 1, S, D] (fp16-rounded), and class_of[pos] in {1, 2}
/// for each arrival position.
struct TwoClassData {
  Tensor keys, values;
  std::vector<int> class_of;
};

/// geometry: "planted_value_divergence" or "correlated". Half the tokens per class, arriving in a
/// random permutation drawn from `seed`.
TwoClassData make_two_class(const std::string& geometry, int64_t seq_len, int64_t head_dim,
                            uint64_t seed);

struct CurdkvRow {
  std::string geometry;
  int64_t seq_len = 0;
  int64_t budget = 0;
  std::string method;           ///< "curdkv" or "h2o"
  double class2_retention = 0;  ///< mean over seeds of (kept class-2 tokens / kept tokens)
  double ms = 0;                ///< mean wall time of one streamed sequence
};

struct CurdkvBenchOptions {
  std::vector<std::string> geometries{"planted_value_divergence", "correlated"};
  std::vector<int64_t> seq_lens{40, 80};
  std::vector<int64_t> budgets{6, 8};
  int64_t head_dim = 24;
  int64_t n_seeds = 5;
  std::string curdkv_extra;  ///< appended to the curdkv spec, e.g. "score=mean"
};

std::vector<CurdkvRow> run_curdkv_bench(const CurdkvBenchOptions& opt);

/// Positions kept by `spec` after streaming the data token by token (prefill through the loop).
std::vector<int64_t> stream_and_keep(const std::string& spec, const TwoClassData& data);

}  // namespace vq::bench

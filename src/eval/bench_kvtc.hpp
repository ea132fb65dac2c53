// The spec's KVTC benchmark (kvtc.txt, "The matched-budget-distortion observable"): reconstruction
// MSE / cosine and stored bytes of kvtc (DP allocation) vs the fixed-uniform and SVDq-split
// baselines at the same bit budget, on a planted skewed-variance geometry and a flat control.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "veloxquant/cache.hpp"
#include "veloxquant/tensor.hpp"

namespace vq::bench {

/// One [1, 1, S, D] block of a benchmark geometry, fp16-rounded:
///   "skewed_variance": N(0,1)[S,6] @ M + 0.05 N(0,1)[S,D], M = N(0,1)[6,D] with row i scaled by
///                      20 / (i + 1) (draw order: M, then the latents, then the noise);
///   "flat":            N(0,1)[S,D].
Tensor make_kvtc_geometry(const std::string& geometry, int64_t seq_len, int64_t head_dim,
                          uint64_t seed);

/// Reconstruction quality of a cache's view against the data it was given.
struct Reconstruction {
  double mse = 0;     ///< mean over every K and V element of (x - x_hat)^2
  double cosine = 0;  ///< mean over every K and V token row of cos(x, x_hat)
};
Reconstruction measure_reconstruction(const Tensor& keys, const Tensor& values,
                                      const FetchResult& got);

struct KvtcRow {
  std::string geometry;
  int64_t seq_len = 0;
  int64_t bit_budget = 0;
  std::string arm;  ///< "kvtc", "uniform" or "svdq_split"
  double mse = 0;   ///< means over seeds
  double cosine = 0;
  double bytes = 0;  ///< kvtc_bytes: realized K + V bytes, everything counted
  double pre_entropy_bytes = 0;
  double entropy_coding_gain = 0;
  double compression_ratio = 0;  ///< fp16 bytes / bytes
  double kept_components = 0;    ///< surviving (bits > 0) components of the K basis
  double ms = 0;                 ///< wall time of update + fetch (encode + decode), per seed
};

struct KvtcBenchOptions {
  std::vector<std::string> geometries{"skewed_variance", "flat"};
  std::vector<int64_t> seq_lens{128, 256};
  std::vector<int64_t> budgets{64, 128};
  std::vector<std::string> arms{"kvtc", "uniform", "svdq_split"};
  int64_t head_dim = 32;
  int64_t n_seeds = 5;
  std::string kvtc_extra;  ///< appended to the kvtc spec, e.g. "alloc=waterfill"
};

/// Keys use seed 2s and values seed 2s + 1 for data seed s = 0..n_seeds-1.
std::vector<KvtcRow> run_kvtc_bench(const KvtcBenchOptions& opt);

}  // namespace vq::bench

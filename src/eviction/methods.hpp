// Small helpers shared by eviction methods' registry entries.
#pragma once

#include "core/options.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/errors.hpp"

namespace vq::eviction {

/// The two options every budgeted eviction method shares, spelled once.
inline OptionSpec budget_option() {
  return opt_int("budget", 512, 1, kMaxBudget, "most tokens kept per head (sinks included)");
}
inline OptionSpec n_sink_option() {
  return opt_int("n_sink", 4, 0, kMaxBudget, "leading positions that are never evicted");
}

/// Head-adaptive budgets (AdaKV) for a method whose evictions follow per-token scores: with
/// heads=adaptive the layer holds H * budget tokens and, after every update, the heads' budgets
/// for the next token are set so that the layer's lowest-scored tokens leave (each head keeps
/// at least its safeguard * budget best).
inline void add_head_budget_options(std::vector<OptionSpec>& options) {
  options.push_back(opt_choice("heads", "uniform", {"uniform", "adaptive"},
                               "per-head budgets: the same for every head, or spread over the "
                               "layer's heads by score (AdaKV)"));
  options.push_back(opt_float("safeguard", "0.2", 0.0, 1.0,
                              "heads=adaptive: fraction of the per-head budget each head keeps"));
}

/// Rejects n_sink >= budget (with n_sink > 0): the sinks alone would fill the cache.
inline void check_sinks_below_budget(const CacheConfig& c) {
  const int64_t budget = c.get_int("budget");
  const int64_t n_sink = c.get_int("n_sink");
  VQ_CHECK(n_sink == 0 || n_sink < budget, InvalidArgument, c.method(), ": n_sink = ", n_sink,
           " must be below budget = ", budget, " (sinks alone would fill the cache)");
}

}  // namespace vq::eviction

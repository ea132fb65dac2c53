// Small helpers shared by eviction methods' registry entries.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

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

/// Decode-time rescore interval of the methods whose scoring rescans every held token
/// (expected_attention, kvzip). rescore=r > 1: one token per update, the held tokens are
/// rescored at every r-th eviction only; in between, the tokens that arrived since the last
/// rescore are kept (score +inf) and the lowest of the last scores leaves. rescore=0 (the
/// default) is auto_rescore()'s interval.
constexpr long long kMaxRescore = 1LL << 20;
inline OptionSpec rescore_option(const std::string& when, const std::string& auto_rule) {
  return opt_int("rescore", 0, 0, kMaxRescore,
                 when +
                     ": rescore the held tokens every r-th eviction (newcomers kept until then); "
                     "0 = auto: " +
                     auto_rule + ", at most (budget - n_sink) / 2; 1 = every eviction");
}

/// What one rescore costs, in decode attention steps over the same n held tokens (bench speed).
enum class RescoreCost {
  QuadraticForm,  // expected_attention: k^T C' k for every held key, ~n D^2 multiply-adds
  Replay,         // kvzip probe=repeat: every held key attends to every held key, ~n^2 D
};

/// rescore=0's interval: one rescore spread over about as many evictions as it costs attention
/// steps, so the amortised rescoring costs about one attention step per token. QuadraticForm:
/// head_dim; Replay: ceil(budget / 4). Capped at (budget - n_sink) / 2 so that the tokens held
/// unscored never crowd out the scored ones; at least 1.
inline int64_t auto_rescore(RescoreCost cost, int64_t budget, int64_t n_sink, int64_t head_dim) {
  const int64_t base = cost == RescoreCost::QuadraticForm ? head_dim : (budget + 3) / 4;
  const int64_t cap = std::max<int64_t>(1, (budget - n_sink) / 2);
  return std::clamp<int64_t>(base, 1, cap);
}

/// The interval a cache of config c (expected_attention or kvzip) at head_dim rescores at:
/// the option's value, or auto_rescore() for rescore=0.
inline int64_t rescore_interval(const CacheConfig& c, int64_t head_dim) {
  const int64_t r = c.get_int("rescore");
  if (r > 0) return r;
  const RescoreCost cost = c.method() == "kvzip" ? RescoreCost::Replay : RescoreCost::QuadraticForm;
  return auto_rescore(cost, c.get_int("budget"), c.get_int("n_sink"), head_dim);
}

}  // namespace vq::eviction

// Small helpers shared by eviction methods' registry entries.
#pragma once

#include "veloxquant/config.hpp"
#include "veloxquant/errors.hpp"

namespace vq::eviction {

/// Rejects n_sink >= budget (with n_sink > 0): the sinks alone would fill the cache.
inline void check_sinks_below_budget(const CacheConfig& c) {
  const int64_t budget = c.get_int("budget");
  const int64_t n_sink = c.get_int("n_sink");
  VQ_CHECK(n_sink == 0 || n_sink < budget, InvalidArgument, c.method(), ": n_sink = ", n_sink,
           " must be below budget = ", budget, " (sinks alone would fill the cache)");
}

}  // namespace vq::eviction

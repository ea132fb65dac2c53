// Helpers shared by the tests.
#pragma once

#include <cstdlib>
#include <string>

#include "core/rng.hpp"
#include "core/thread_pool.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/tensor.hpp"
#include "veloxquant/threads.hpp"

namespace vqtest {

/// Puts the process-wide thread count and piece size back when a test ends (also on failure).
struct RestoreThreads {
  int n = vq::thread_count();
  int64_t piece = vq::min_piece_macs();
  ~RestoreThreads() {
    vq::set_thread_count(n);
    vq::set_min_piece_macs(piece);
  }
};

/// Random [B, H, S, D] tensor with a decaying per-channel scale (a realistic KV spectrum).
inline vq::Tensor random_tensor(int64_t B, int64_t H, int64_t S, int64_t D, uint64_t seed,
                                double scale = 1.0) {
  vq::Rng rng(seed);
  vq::Tensor t(B, H, S, D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t d = 0; d < D; ++d)
          t.at(b, h, s, d) =
              static_cast<float>(scale * rng.normal() / (1.0 + 0.3 * static_cast<double>(d)));
  return t;
}

/// A spec usable at head_dim D: q8_0 / q4_0 blocks lie inside a head, so where llama.cpp's block
/// of 32 does not divide D and the spec names no block, the block=16 or block=8 variant.
inline vq::CacheConfig spec_at_dim(const std::string& spec, int64_t D) {
  vq::CacheConfig c = vq::CacheConfig::parse(spec);
  if (vq::find_option(vq::find_method(c.method()), "block") != nullptr && !c.is_set("block") &&
      D % 32 != 0)
    c.set("block", D % 16 == 0 ? "16" : "8");
  return c;
}

/// Directory holding the real models, or "" when absent (tests then skip).
inline std::string models_dir() {
  if (const char* env = std::getenv("VQ_MODELS_DIR")) return env;
#ifdef VQ_SOURCE_DIR
  return std::string(VQ_SOURCE_DIR) + "/../shared/models";
#else
  return "../shared/models";
#endif
}

}  // namespace vqtest

// Helpers shared by the tests.
#pragma once

#include <cstdlib>
#include <string>

#include "core/rng.hpp"
#include "veloxquant/tensor.hpp"

namespace vqtest {

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

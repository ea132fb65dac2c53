// The frozen Gumbel noise of `keyformer`, exposed so tests can rebuild its scores.
#pragma once

#include <cstdint>

namespace vq::eviction {

/// Standard Gumbel(0, 1) sample -log(-log(u)) for the token at absolute position `pos` under a
/// layer's seed: a pure function of (seed, pos), so every head of the layer and every chunking of
/// the input sees the same value for the same token.
double keyformer_gumbel(uint64_t seed, int64_t pos);

}  // namespace vq::eviction

// One-shot compression of a prefilled context, as kvpress (NVIDIA's library of "presses") does
// it: the whole context is prefilled with exact attention, every context token of every KV head
// is scored once by the method, and each KV head keeps the int(S * (1 - ratio)) best tokens
// (at least 1); later tokens are appended and nothing more is evicted.
//
//   OneShotScorer      a method's scoring rule: scores [H, S] (higher = keep) from one layer's
//                      keys and values [H, S, D] (keys after RoPE) and its queries [Hq, S, D]
//   keep_top           the shared per-head top-k keeper (kvpress's rounding)
//   keep_top_adaptive  AdaKV: the layer's H * n_keep slots spread over its heads by score
//   OneShotCache       a cache that applies the above to its first multi-token update and
//                      stores the kept rows through the method's store (its codec, if composed)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "eviction/eviction_cache.hpp"
#include "veloxquant/config.hpp"

namespace vq {

/// One layer's prefilled context as a scorer sees it (batch item b of the update).
struct OneShotInput {
  int64_t H = 0;             ///< KV heads
  int64_t Hq = 0;            ///< query heads (0 when no queries were supplied)
  int64_t S = 0;             ///< context tokens
  int64_t D = 0;             ///< head dimension
  const float* K = nullptr;  ///< [H, S, D] keys after RoPE (row s of head h at (h * S + s) * D)
  const float* V = nullptr;  ///< [H, S, D] values
  const float* Q = nullptr;  ///< [Hq, S, D] queries after RoPE, or nullptr
  int64_t pos0 = 0;          ///< absolute position of row 0
  int64_t layer = 0;
  uint64_t seed = 0;  ///< the cache's seed (CacheContext::seed), as its decode-time cache gets it
  const float* key(int64_t h, int64_t s) const { return K + (h * S + s) * D; }
  const float* value(int64_t h, int64_t s) const { return V + (h * S + s) * D; }
  const float* query(int64_t hq, int64_t s) const { return Q + (hq * S + s) * D; }
  int64_t group() const { return Hq > 0 ? Hq / H : 0; }  ///< query heads per KV head
  /// Probes of KV head h: its G query heads when queries are supplied and wanted, else its own
  /// keys (the key-as-query proxy, one probe).
  int64_t probes(bool use_queries) const { return Q && use_queries ? group() : 1; }
  const float* probe(bool use_queries, int64_t h, int64_t g, int64_t s) const {
    return Q && use_queries ? query(h * group() + g, s) : key(h, s);
  }
};

/// A method's one-shot scoring rule (registered through MethodInfo::make_scorer).
class OneShotScorer {
 public:
  virtual ~OneShotScorer() = default;
  /// Writes scores [H, S] row-major; a higher score is kept first. Throws InvalidArgument when
  /// the context is too short for the rule (e.g. SnapKV's window).
  virtual void score(const OneShotInput& in, double* scores) const = 0;
};

}  // namespace vq

namespace vq::eviction {

/// Tokens kept per head out of S at `ratio` (the fraction removed): max(1, int(S * (1 - ratio))),
/// kvpress's rounding (S = 100 at 0.875 keeps 12). Throws unless 0 <= ratio < 1.
int64_t one_shot_keep(int64_t S, double ratio);

/// Per head, the n_keep indices in [0, S) with the highest scores (ties: the later index stays),
/// ascending. scores: [H, S] row-major.
std::vector<std::vector<int64_t>> keep_top(const double* scores, int64_t H, int64_t S,
                                           int64_t n_keep);

/// AdaKV (kvpress's AdaKVPress): each head first secures its int(n_keep * alpha) best tokens;
/// then the layer keeps its H * n_keep best (head, token) pairs overall, so heads whose scores
/// are concentrated give slots to heads whose scores are spread. Ties: later index, then lower
/// head. Per head ascending indices.
std::vector<std::vector<int64_t>> keep_top_adaptive(const double* scores, int64_t H, int64_t S,
                                                    int64_t n_keep, double alpha);

/// softmax over keys [0, upto] of K[j] . q / sqrt(D) into out[0, S) (zeros after upto), in double.
void causal_attention(const float* K, int64_t S, int64_t D, const float* q, int64_t upto,
                      double* out);

/// One-shot compression of a prefilled context: per (batch b, head h) at index b * H + h, the
/// ascending context rows kept (scores from `scorer`, then keep_top or, when adaptive,
/// keep_top_adaptive with `alpha`). seed: the layer's cache seed (keyformer's noise). pre_rope: the
/// keys are un-rotated (rotated for the scorer).
std::vector<std::vector<int64_t>> choose_one_shot(const OneShotScorer& scorer, double ratio,
                                                  bool adaptive, double alpha, const Tensor& keys,
                                                  const Tensor& values, const Tensor* queries,
                                                  int64_t pos0, int64_t layer, uint64_t seed,
                                                  bool pre_rope);

/// The seed curdkv's one-shot scorer (curdkv_one_shot.cpp).
std::unique_ptr<OneShotScorer> make_curdkv_scorer(const CacheConfig& c);

/// A one-shot spec: an eviction method (optionally composed with a codec) and the head budget
/// rule. Syntax: "<spec>" or "adakv/<spec>" or "adakv:alpha=A/<spec>" (alpha in [0, 1],
/// default 0.2 as kvpress); for methods with the option, "<method>:heads=adaptive,safeguard=A"
/// is the same rule (and also works in the decode protocol).
struct OneShotSpec {
  CacheConfig method;
  bool adaptive = false;
  double alpha = 0.2;
  bool by_option = false;  ///< adaptive through the method's heads=adaptive (no prefix)
  std::string to_string() const;
};
/// Parses a one-shot spec and checks that the method is an eviction method with one-shot scoring
/// (InvalidArgument naming the method otherwise).
OneShotSpec parse_one_shot(const std::string& spec);

/// The cache of one layer for the prefill protocol: its first update with more than one token is
/// the context, compressed once at `ratio` by the method's scorer. Then, by default, every later
/// token is appended (no further eviction); with keep_policy the method's own decode-time cache
/// continues from the compressed context, holding each head to its compressed size (the spec's
/// budget is replaced by it; with adakv the layer's total, spread by scores). Kept rows go
/// through the method's store (fp16, or its codec).
std::unique_ptr<KVCache> make_one_shot_cache(const OneShotSpec& spec, double ratio,
                                             int64_t head_dim, int64_t layer = 0,
                                             int64_t n_layers = 1, uint64_t seed = 0,
                                             bool keep_policy = false);

}  // namespace vq::eviction

// Fidelity of KV-cache methods on a real model: every method runs over the same windows of text
// as the uncompressed `full` cache, and is scored by how far its next-token distributions move
// (KL divergence, top-1 agreement), by its own perplexity, by the memory its caches actually hold
// and by its speed. The definitions are written out in docs/eval.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "veloxquant/config.hpp"
#include "veloxquant/model.hpp"

namespace vq::eval {

/// Split text tokens (no BOS) into windows of at most `context` tokens, each starting with BOS:
/// window k is BOS + text[k * (context - 1), (k + 1) * (context - 1)). With max_tokens > 0 only
/// the first max_tokens text tokens are used. A window predicts each of its text tokens, so the
/// number of predicted tokens equals the number of text tokens used.
/// `bos` is the token each window starts with (llama2.c's 1 by default; the tokenizer's BOS for
/// other models).
std::vector<std::vector<int32_t>> make_windows(const std::vector<int32_t>& text, int64_t context,
                                               int64_t max_tokens = 0,
                                               int32_t bos = Tokenizer::kBos);

/// `veloxquant eval`'s windows: text tokens (no BOS) after the first `skip_tokens`, cut by
/// make_windows into windows of `context` starting with `bos` (at most max_tokens text tokens,
/// 0 = all). `source` names the text in errors: InvalidArgument when skip_tokens leaves nothing.
std::vector<std::vector<int32_t>> eval_windows(const std::vector<int32_t>& text, int64_t context,
                                               int64_t skip_tokens, int64_t max_tokens, int32_t bos,
                                               const std::string& source);

/// How windows are fed to the engine: the first `prefill` tokens of each window (BOS included)
/// through Engine::prefill (exact attention over the chunk, then one cache update), the rest one
/// token at a time through Engine::step. `seed` and `strict_view` go to EngineOptions.
struct RunOptions {
  int64_t prefill = 0;
  uint64_t seed = 0;
  bool strict_view = false;
  EngineOptions engine() const {
    EngineOptions e;
    e.seed = seed;
    e.strict_view = strict_view;
    return e;
  }
};

struct MethodResult {
  std::string spec;           ///< canonical spec string
  int64_t predicted = 0;      ///< predicted tokens (every text token of every window)
  double nll_sum = 0;         ///< sum of -ln p(next token), nats
  double perplexity = 0;      ///< exp(nll_sum / predicted)
  double kl_mean = 0;         ///< mean over predicted positions of KL(full || method), nats
  double kl_max = 0;          ///< largest per-position KL
  double top1_agreement = 1;  ///< fraction of positions whose argmax equals full's argmax
  double ppl_delta = 0;       ///< perplexity - full's perplexity
  double ppl_delta_rel = 0;   ///< ppl_delta / full's perplexity
  /// Bytes held per token per (layer, KV head): sum over layers of CacheStats::kept_bytes after
  /// processing position p, divided by n_layers * n_kv_heads * (p + 1); averaged over positions.
  double bytes_per_token = 0;         ///< resident bytes (kept_bytes) per layer-head, per position
  double stored_bytes_per_token = 0;  ///< the kept K/V in storage form (stored_bytes), same mean
  /// The same quantity at the last processed position of each window, averaged over windows.
  double bytes_per_token_final = 0;
  double fp16_bytes_per_token = 0;  ///< 2 (K, V) * head_dim * 2 bytes
  double compression_ratio = 1;     ///< fp16_bytes_per_token / bytes_per_token
  double compression_ratio_final = 1;
  int64_t tokens_processed = 0;  ///< tokens fed through the engine
  /// Prefill protocol only: the fraction of context tokens removed per KV head (-1 otherwise)
  /// and the tokens each head keeps at the compression (int(N * (1 - ratio)), at least 1).
  double evict_ratio = -1;
  int64_t kept_per_head = 0;
  double seconds = 0;  ///< wall time inside Engine::prefill/step (scoring excluded)
  double tokens_per_s = 0;
};

/// The fields of a MethodResult by name, as `veloxquant eval --json` writes them.
nlohmann::json to_json(const MethodResult& r);

struct FidelityOptions {
  std::vector<std::string> methods;  ///< specs to compare with `full` (full may be listed too)
  RunOptions run;
  /// Called after each (window, method) run with (done, total).
  std::function<void(int64_t, int64_t)> progress;
};

struct FidelityReport {
  int64_t n_windows = 0;
  int64_t predicted_tokens = 0;
  int64_t context = 0;
  MethodResult reference;             ///< `full`
  std::vector<MethodResult> methods;  ///< in the order given
};

/// Run `full` and every method over `windows` (from make_windows). Throws InvalidArgument for a
/// bad spec before any work is done.
FidelityReport run_fidelity(const Model& model, const std::vector<std::vector<int32_t>>& windows,
                            const FidelityOptions& opt);

/// The default comparison for a model with context length `context` and head dimension
/// `head_dim`: full; h2o and curdkv at budgets context/8, /4, /2; kvtc at 2, 4 and 8 bits per
/// value of the head (bit_budget = 2, 4, 8 x head_dim per token, i.e. 1/8, 1/4, 1/2 of fp16
/// before overheads); q8_0; q4_0. Methods not registered in this build are left out.
std::vector<std::string> default_methods(int64_t context, int64_t head_dim);

/// The prefill protocol (kvpress's way of judging eviction): each window's first `context`
/// tokens (BOS included) go through one exact prefill, then each method compresses its cache
/// once, at each ratio, with its one-shot scoring (eviction/one_shot.hpp), and the next
/// `continuation` tokens are teacher-forced one at a time with no further eviction. Scored:
/// the continuation's predictions (positions context .. context + continuation - 1, predicting
/// the token after each), against the full cache over the same tokens.
struct PrefillOptions {
  /// One-shot specs ("snapkv:window=64", "adakv/knorm", "snapkv+q8_0", ...), each run at every
  /// ratio; a transform method alone ("q8_0", "kvtc:...") evicts nothing and runs once (ratio 0).
  std::vector<std::string> methods;
  std::vector<double> ratios = {0.5};
  int64_t context = 0;       ///< N; 0 = 3/4 of the model's context length
  int64_t continuation = 0;  ///< M; 0 = the rest of each window
  uint64_t seed = 0;
  /// After the compression, keep the method's decode-time policy on: each head is held to its
  /// compressed size through the continuation (default: no further eviction, as kvpress).
  bool keep_policy = false;
  std::function<void(int64_t, int64_t)> progress;
};

struct PrefillReport {
  int64_t n_windows = 0;              ///< windows used (long enough for context + 1 continuation)
  int64_t skipped_windows = 0;        ///< shorter windows left out
  int64_t context = 0;                ///< N
  int64_t continuation = 0;           ///< M (the longest used)
  int64_t predicted_tokens = 0;       ///< continuation predictions scored
  MethodResult reference;             ///< `full` over the same tokens
  std::vector<MethodResult> methods;  ///< for each method, each ratio in the order given
};

/// Runs the prefill protocol. Bad input (a ratio outside [0, 1), a context that leaves no
/// continuation, a method without one-shot scoring) is refused with InvalidArgument before any
/// work.
PrefillReport run_prefill_protocol(const Model& model,
                                   const std::vector<std::vector<int32_t>>& windows,
                                   const PrefillOptions& opt);

/// The default one-shot comparison: every eviction method with one-shot scoring, kvpress's
/// settings where kvpress has the press.
std::vector<std::string> default_one_shot_methods();

/// Teacher-forced perplexity of one method (KL/top-1 fields left at their no-difference values).
MethodResult perplexity(const Model& model, const std::vector<std::vector<int32_t>>& windows,
                        const CacheConfig& method, const RunOptions& run = {},
                        const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace vq::eval

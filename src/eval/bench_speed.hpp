// `veloxquant bench speed`: per-token cost of eviction methods next to the decode attention they
// serve, KVTC codec throughput next to zstd and llama.cpp's q8_0/q4_0, and model tokens/s.
// Eviction rows run on one thread; codec rows on one thread and again on the pool's threads; the
// layer rows (a layer's cache update over 8 KV heads) and the generate rows use the thread pool
// (--threads), with a 1-thread reference measured in the same run. Every row carries a ratio to its
// reference because absolute times drift.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "veloxquant/npy.hpp"

namespace vq::bench {

struct SpeedRow {
  std::string group;  ///< "attention", "eviction", "layer", "codec", "generate"
  std::string name;   ///< method / codec / operation
  int64_t n = 0;      ///< tokens in the cache (eviction) or S (codec)
  int64_t D = 0;
  double value = 0;      ///< ns per token (eviction), MB/s (codec), tokens/s (generate)
  std::string unit;      ///< "ns/token", "MB/s", "tok/s"
  double ratio = 0;      ///< value / reference value
  std::string ratio_to;  ///< what the ratio is against
  std::string note;      ///< e.g. decisions agree, bytes per value
};

struct SpeedOptions {
  std::vector<int64_t> ns{512, 4096};
  /// Eviction methods timed (ids; empty = every eviction method in the registry).
  std::vector<std::string> evict_methods;
  std::vector<int64_t> dims{64, 128};
  /// The eviction rows on real keys and values: a dump-kv .npy [layers, 2, kv_heads, tokens, D],
  /// every (layer, head) a stream, times averaged over them; D is the file's (dims unused), and
  /// every n needs the tokens it streams after the n it caches. "" = one synthetic stream.
  std::string kv_path;
  int64_t rank_cap = 16;
  double min_seconds = 0.3;  ///< time budget per measured row
  bool codec = true;
  bool attention = true;  ///< decode attention through the store vs fp32 rows
  bool eviction = true;
  bool layer = true;  ///< a layer's cache update, the pool's threads vs 1
  bool generate = true;
  std::string models_dir;  ///< for the generate rows ("" = default search)
  /// The generate rows' model: a llama2.c .bin, a .gguf or a Hugging Face directory ("" =
  /// stories260K.bin from models_dir or the default search).
  std::string model_path;
  std::function<void(const std::string&)> progress;  ///< called before each row (may be empty)
};

std::vector<SpeedRow> run_speed_bench(const SpeedOptions& opt);

/// Per-token cost (ns) of a cache of `spec` at head dim D: the best of at least 5 rounds (and
/// min_s seconds), each building the cache from rows [0, n) of k and v in one update (not timed)
/// and timing `tokens` one-token updates with rows n, n + 1, ... (one head; k, v are [S, D]).
/// With q ([G, S, D], query head g's rows at g * S * D) every update also passes those rows'
/// G true queries.
double stream_ns_per_token(const std::string& spec, const std::vector<float>& k,
                           const std::vector<float>& v, int64_t n, int64_t D, int64_t tokens,
                           double min_s, const std::vector<float>* q = nullptr, int64_t G = 0);

/// One head's keys and values, [tokens, D] row-major each.
struct KvStream {
  std::vector<float> k, v;
};

/// {layers, kv_heads, tokens, head_dim} of a dump-kv array [L, 2, H, S, D] of a floating-point
/// dtype; InvalidArgument naming `what` and the shape or dtype otherwise.
std::array<int64_t, 4> kv_stream_shape(const NpyArray& a, const std::string& what);
/// Every (layer, KV head) of such an array as a stream of its first `tokens` tokens (<= S), in
/// order layer-major.
std::vector<KvStream> kv_streams(const NpyArray& a, const std::string& what, int64_t tokens);

/// Realistic synthetic K/V for one head: decaying spectrum plus a few large outlier channels.
/// Returns [S, D] row-major.
std::vector<float> realistic_kv(int64_t S, int64_t D, uint64_t seed, bool keys);

}  // namespace vq::bench

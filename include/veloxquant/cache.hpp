// The cache API every method implements. One KVCache holds one layer: all batches and KV heads.
//
//   update(keys, values[, queries])   keys/values [B, H, S, D] new tokens, queries [B, Hq, S, D]
//   view()                            zero-copy view of what is kept, per (b, h) head, slot order
//   fetch()                           a copy [B, H, n_kept, D], sorted by absolute position
//   offset()                          positions seen so far (not the number kept)
//   stats()                           byte accounting (fp16 K+V baseline)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "veloxquant/config.hpp"
#include "veloxquant/tensor.hpp"

namespace vq {

/// What a cache is told about its place in the model.
struct CacheContext {
  int64_t head_dim = 0;   ///< D; every update must match
  int64_t layer = 0;      ///< layer index (0-based)
  int64_t n_layers = 1;
  uint64_t seed = 0;      ///< per-layer seed for methods with randomness
};

/// One kept head: `n` tokens, keys and values [n, D] row-major, absolute positions [n].
/// Rows are in the cache's internal slot order (not necessarily sorted by position).
struct HeadView {
  const float* keys = nullptr;
  const float* values = nullptr;
  const int64_t* positions = nullptr;
  int64_t n = 0;
};

struct KVView {
  int64_t B = 0, H = 0, D = 0;
  std::vector<HeadView> heads;  ///< index b * H + h
  const HeadView& at(int64_t b, int64_t h) const { return heads[static_cast<size_t>(b * H + h)]; }
};

/// The copied result of update_and_fetch: kept tokens sorted by position.
struct FetchResult {
  Tensor keys;                     ///< [B, H, n_kept, D]
  Tensor values;                   ///< [B, H, n_kept, D]
  std::vector<int64_t> positions;  ///< [B, H, n_kept], absolute positions, ascending per head
  int64_t n_kept = 0;
};

/// Byte accounting. Baseline is fp16 K + V (2 bytes per value).
struct CacheStats {
  int64_t tokens_seen = 0;    ///< positions ever passed to update
  int64_t tokens_kept = 0;    ///< tokens held by head (b=0, h=0)
  double kept_bytes = 0;      ///< bytes actually held for K + V, all heads, every overhead counted
  double full_seq_bytes = 0;  ///< fp16 bytes had every token been kept
  double compression_ratio = 1;  ///< full_seq_bytes / kept_bytes (1 when empty)
  /// Method-specific quantities (e.g. kvtc_bytes, pre_entropy_bytes, entropy_coding_gain).
  std::vector<std::pair<std::string, double>> extra;
  double get(const std::string& key, double fallback = 0) const;
};

class KVCache {
 public:
  explicit KVCache(CacheConfig config, CacheContext ctx);
  virtual ~KVCache() = default;
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

  /// Append new tokens. keys/values: [B, H, S, D] with D == head_dim; S may be 0.
  /// queries (optional): [B, Hq, S, D], Hq a multiple of H; query head q belongs to KV head q/(Hq/H).
  /// B and H must stay the same across calls. NaN/Inf is rejected.
  void update(const Tensor& keys, const Tensor& values, const Tensor* queries = nullptr);
  /// update() then fetch().
  FetchResult update_and_fetch(const Tensor& keys, const Tensor& values,
                               const Tensor* queries = nullptr);

  /// Zero-copy view of what is kept (valid until the next update). Empty before the first update.
  const KVView& view() const { return view_; }
  /// Copy of what is kept, sorted by position per head.
  FetchResult fetch() const;

  /// Number of positions seen so far (the next token's position).
  int64_t offset() const { return offset_; }
  virtual CacheStats stats() const;

  const CacheConfig& config() const { return config_; }
  const CacheContext& context() const { return ctx_; }
  int64_t head_dim() const { return ctx_.head_dim; }
  int64_t batch() const { return B_; }
  int64_t kv_heads() const { return H_; }

  /// True if this cache wants keys before RoPE (the engine then rotates what it fetches).
  virtual bool wants_pre_rope_keys() const { return false; }

 protected:
  /// Implemented by each method. Inputs are already validated; offset() is the position of the
  /// first new token. Must leave view_ describing the kept state.
  virtual void do_update(const Tensor& keys, const Tensor& values, const Tensor* queries) = 0;
  /// Called once, on the first non-empty update, when B and H become known.
  virtual void on_shape_known(int64_t B, int64_t H) {}

  KVView view_;

 private:
  CacheConfig config_;
  CacheContext ctx_;
  int64_t offset_ = 0;
  int64_t B_ = 0, H_ = 0;
};

/// Build one layer's cache from a config.
std::unique_ptr<KVCache> make_cache(const CacheConfig& config, int64_t head_dim,
                                    int64_t layer = 0, int64_t n_layers = 1, uint64_t seed = 0);
std::unique_ptr<KVCache> make_cache(const std::string& spec, int64_t head_dim);

/// One cache per layer, the same config in each, per-layer seeds derived from `seed`.
std::vector<std::unique_ptr<KVCache>> build_caches(const CacheConfig& config, int64_t n_layers,
                                                   int64_t head_dim, uint64_t seed = 0);

/// Seed for layer `layer` derived from a model seed (splitmix64; stable across platforms).
uint64_t layer_seed(uint64_t seed, int64_t layer);

}  // namespace vq

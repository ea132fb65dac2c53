// The cache API every method implements. One KVCache holds one layer: all batches and KV heads.
//
//   update(keys, values[, queries])   keys/values [B, H, S, D] new tokens, queries [B, Hq, S, D]
//   keys(b, h) / values(b, h)         what head (b, h) keeps, in slot order, read block by block
//                                     through its resident form (no decoded copy is kept)
//   positions(b, h), kept(b, h)       the absolute position of each slot, and the slot count
//   fetch()                           a decoded copy [B, H, n_kept, D], sorted by position
//   offset()                          positions seen so far (not the number kept)
//   stats()                           byte accounting (fp16 K+V baseline)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "veloxquant/config.hpp"
#include "veloxquant/row_source.hpp"
#include "veloxquant/tensor.hpp"

namespace vq {

/// What a cache is told about its place in the model.
struct CacheContext {
  int64_t head_dim = 0;  ///< D; every update must match
  int64_t layer = 0;     ///< layer index (0-based)
  int64_t n_layers = 1;
  uint64_t seed = 0;  ///< per-layer seed for methods with randomness
  /// How kept rows are stored: a codec method's config (q8_0, kvtc:..., bf16), or empty for
  /// fp16 rows. Set from the "+codec" part of a composed spec.
  CacheConfig codec;
};

/// The copied result of update_and_fetch: kept tokens sorted by position.
struct FetchResult {
  Tensor keys;                     ///< [B, H, n_kept, D]
  Tensor values;                   ///< [B, H, n_kept, D]
  std::vector<int64_t> positions;  ///< [B, H, n_kept], absolute positions, ascending per head
  int64_t n_kept = 0;
};

/// Byte accounting, counted from the cache's buffers (capacity, not size). Baseline: fp16 K + V.
/// kept_bytes = content_bytes + codec_param_bytes + policy_bytes + index_bytes + overhead_bytes.
struct CacheStats {
  int64_t tokens_seen = 0;       ///< positions ever passed to update
  int64_t tokens_kept = 0;       ///< tokens held by head (b=0, h=0)
  double kept_bytes = 0;         ///< resident bytes: everything the cache holds, all heads
  double content_bytes = 0;      ///< K/V rows in their resident form (codes, fp16 window)
  double codec_param_bytes = 0;  ///< chunk parameters and fitted codec state (a PCA basis)
  double policy_bytes = 0;       ///< per-token policy state: scores, projections, windows, scratch
  double index_bytes = 0;        ///< per-slot bookkeeping: positions, row locations
  double overhead_bytes = 0;     ///< fixed per-cache and per-head structures
  double stored_bytes = 0;       ///< the kept rows in storage form (entropy coded), for reference
  double full_seq_bytes = 0;     ///< fp16 bytes had every token been kept
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
  /// queries (optional): [B, Hq, S, D], Hq a multiple of H; query head q belongs to KV head
  /// q/(Hq/H). B and H must stay the same across calls. NaN/Inf is rejected, and so is a key or
  /// value beyond storable_range() (it would read back as +-inf).
  void update(const Tensor& keys, const Tensor& values, const Tensor* queries = nullptr);
  /// update() then fetch().
  FetchResult update_and_fetch(const Tensor& keys, const Tensor& values,
                               const Tensor* queries = nullptr);

  /// The keys / values head (b, h) keeps, slot order (not sorted by position), decoded block by
  /// block on read. Valid until the next update. Throws before the first update.
  virtual const store::RowSource& keys(int64_t b, int64_t h) const = 0;
  virtual const store::RowSource& values(int64_t b, int64_t h) const = 0;
  /// Absolute position of each of the kept(b, h) slots.
  virtual const int64_t* positions(int64_t b, int64_t h) const = 0;
  virtual int64_t kept(int64_t b, int64_t h) const = 0;
  /// Decoded copy of what is kept, sorted by position per head.
  FetchResult fetch() const;

  /// Number of positions seen so far (the next token's position).
  int64_t offset() const { return offset_; }
  virtual CacheStats stats() const = 0;

  const CacheConfig& config() const { return config_; }
  const CacheContext& context() const { return ctx_; }
  int64_t head_dim() const { return ctx_.head_dim; }
  int64_t batch() const { return B_; }
  int64_t kv_heads() const { return H_; }

  /// The largest magnitude of a key or value this cache holds and reads back finite, and what
  /// sets it (a static string). The default: fp16 rows, |x| <= 65504.
  struct StorableRange {
    double max_abs = 65504.0;
    const char* what = "fp16 rows";
  };
  virtual StorableRange storable_range() const { return {}; }
  /// True if this cache wants keys before RoPE (the engine then rotates what it fetches).
  virtual bool wants_pre_rope_keys() const { return false; }
  /// Replaces n rows of keys (kv = 0) or values (kv = 1) of KV head h (head_dim values each,
  /// `stride` floats apart) by what this cache would read back after storing them, so that a
  /// prefill attends its own chunk at the precision later steps see it (llama.cpp stores a
  /// batch's K/V in its cache before attention reads them). The default keeps fp16 rows.
  virtual void round_as_stored(int kv, int64_t h, float* rows, int64_t n, int64_t stride);
  /// True if attention should round queries to q8_0 blocks of *block values for K.Q (llama.cpp's
  /// behaviour over a quantized K cache).
  virtual bool quantizes_queries(int64_t* block) const {
    (void)block;
    return false;
  }

 protected:
  /// Implemented by each method. Inputs are already validated; offset() is the position of the
  /// first new token. Afterwards keys()/values()/positions() describe the kept state.
  virtual void do_update(const Tensor& keys, const Tensor& values, const Tensor* queries) = 0;
  /// Called once, on the first non-empty update, when B and H become known.
  virtual void on_shape_known(int64_t B, int64_t H) {}
  /// Throws unless (b, h) names a head of the cache (after the first update).
  void check_head(int64_t b, int64_t h) const;

 private:
  CacheConfig config_;
  CacheContext ctx_;
  int64_t offset_ = 0;
  int64_t B_ = 0, H_ = 0;
};

/// Build one layer's cache from a config.
std::unique_ptr<KVCache> make_cache(const CacheConfig& config, int64_t head_dim, int64_t layer = 0,
                                    int64_t n_layers = 1, uint64_t seed = 0);
std::unique_ptr<KVCache> make_cache(const std::string& spec, int64_t head_dim);

/// One cache per layer, the same config in each, per-layer seeds derived from `seed`.
std::vector<std::unique_ptr<KVCache>> build_caches(const CacheConfig& config, int64_t n_layers,
                                                   int64_t head_dim, uint64_t seed = 0);

/// Seed for layer `layer` derived from a model seed (splitmix64; stable across platforms).
uint64_t layer_seed(uint64_t seed, int64_t layer);

}  // namespace vq

namespace vq {

/// A cache that holds plain fp32 rows per head (instrumented caches in tests and tools, e.g. a
/// capture of every row a model produces). Subclasses append to rows(b, h, kv) and pos(b, h) in
/// do_update, then call publish(). Its stats count the fp32 buffers it holds.
class Fp32RowsCache : public KVCache {
 public:
  using KVCache::KVCache;
  const store::RowSource& keys(int64_t b, int64_t h) const override;
  const store::RowSource& values(int64_t b, int64_t h) const override;
  const int64_t* positions(int64_t b, int64_t h) const override;
  int64_t kept(int64_t b, int64_t h) const override;
  CacheStats stats() const override;
  /// fp32 rows: kept as they are.
  void round_as_stored(int, int64_t, float*, int64_t, int64_t) override {}
  StorableRange storable_range() const override { return {3.4028234663852886e38, "fp32 rows"}; }

 protected:
  void on_shape_known(int64_t B, int64_t H) override;
  std::vector<float>& rows(int64_t b, int64_t h, int kv);
  std::vector<int64_t>& pos(int64_t b, int64_t h);
  /// Makes keys()/values() see the rows appended so far.
  void publish();

 private:
  std::vector<std::vector<float>> rows_[2];
  std::vector<std::vector<int64_t>> pos_;
  std::vector<store::Fp32Rows> src_[2];
};

}  // namespace vq

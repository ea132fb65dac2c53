// The shared cache machinery of the transform family (kvtc, uniform, svdq_split, q8_0, q4_0).
//
// Keys and values are coded as independent streams: one per (batch, head) and K/V, or, for
// heads-coupled formats, one per batch and K/V whose rows are a token's values across all heads.
// Every token is kept (positions 0..offset-1); what changes is how it is stored:
//   1. New rows wait raw in a window, stored (and counted) at fp16.
//   2. A fitting coder (PCA) fits once, when fit_tokens rows have arrived, on all of them, and is
//      then frozen; those rows are encoded right away in chunks of at most chunk_tokens, split
//      evenly. Coders without a fit start at once.
//   3. After that, each time chunk_tokens rows are waiting they are encoded as one chunk.
//      A coder whose model is given (fit_uses_rows() false: a calibration file) skips 2 and writes
//      its header before its first chunk.
// Optional (kvtc): the first sink_tokens positions stay fp16 for good and never reach the coder;
// with recent_tokens, a chunk is encoded only when that many rows remain raw after it.
// Each chunk is decoded once, from its stored bytes, by a decoder rebuilt from the stored header,
// into a per-head fp32 buffer that view() exposes; raw rows appear there fp16-rounded. So the cost
// per token is constant (no re-encoding of history) and the view is exactly what a reader of the
// stored bytes would get.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "transform/row_coder.hpp"
#include "veloxquant/cache.hpp"

namespace vq::transform {

using CoderFactory = std::function<std::unique_ptr<RowCoder>(int64_t width)>;

using StreamCoderFactory =
    std::function<std::unique_ptr<RowCoder>(int64_t width, const StreamId& id)>;

struct TransformSettings {
  int64_t chunk_tokens = 128;  ///< rows per chunk once fitted (>= 1)
  int64_t fit_tokens = 1;      ///< rows collected before a fitting coder fits (>= 1)
  bool coupled = false;        ///< one stream spans every head of a batch row (W = H * D)
  int64_t sink_tokens = 0;     ///< the first positions are kept at fp16 and never encoded
  int64_t recent_tokens = 0;   ///< a chunk is encoded only if this many rows stay raw after it
  bool pre_rope = false;       ///< the cache asks the engine for un-rotated keys
};

/// Sizes of `n` rows split evenly into chunks of at most `chunk` rows.
std::vector<int64_t> even_chunks(int64_t n, int64_t chunk);

class TransformCache final : public KVCache {
 public:
  TransformCache(CacheConfig config, CacheContext ctx, TransformSettings settings,
                 CoderFactory factory);
  /// A factory told each stream's identity (layer, head, K/V).
  TransformCache(CacheConfig config, CacheContext ctx, TransformSettings settings,
                 StreamCoderFactory factory);

  bool wants_pre_rope_keys() const override { return settings_.pre_rope; }
  const store::RowSource& keys(int64_t b, int64_t h) const override {
    check_head(b, h);
    return ksrc_[static_cast<size_t>(b * kv_heads() + h)];
  }
  const store::RowSource& values(int64_t b, int64_t h) const override {
    check_head(b, h);
    return vsrc_[static_cast<size_t>(b * kv_heads() + h)];
  }
  const int64_t* positions(int64_t b, int64_t h) const override {
    check_head(b, h);
    return positions_.data();
  }
  int64_t kept(int64_t b, int64_t h) const override {
    return ksrc_.empty() ? 0 : ksrc_[static_cast<size_t>(b * kv_heads() + h)].rows();
  }


  /// Byte accounting: kept_bytes is the realized total (stored sections + raw window at fp16).
  /// extra: kvtc_bytes, pre_entropy_bytes, entropy_coding_gain, full_seq_bytes,
  /// compression_ratio, each also with _k / _v; basis_bytes, params_bytes, payload_bytes,
  /// table_bytes, raw_bytes, raw_tokens (window + sinks), sink_tokens, encoded_tokens, fitted,
  /// external_basis_bytes (the calibration entries this layer's streams use but do not store:
  /// mean, kept basis rows and, with quant=calibrated, the kept ranges; each entry once; not in
  /// kept_bytes).
  CacheStats stats() const override;

  const TransformSettings& settings() const { return settings_; }
  /// The encoder of one stream (nullptr before the first update). kv: 0 = keys, 1 = values.
  /// Coupled caches have one stream per batch: h is ignored.
  const RowCoder* encoder(int64_t b, int64_t h, int kv) const { return stream(b, h, kv).enc.get(); }
  /// The bytes stored so far for one stream (header + chunks; raw rows are not in it).
  const EncodedSection& section(int64_t b, int64_t h, int kv) const { return stream(b, h, kv).sec; }
  bool fitted(int64_t b, int64_t h, int kv) const { return stream(b, h, kv).fitted; }
  int64_t raw_tokens(int64_t b, int64_t h, int kv) const { return stream(b, h, kv).n_pending; }

 protected:
  void do_update(const Tensor& keys, const Tensor& values, const Tensor* queries) override;
  void on_shape_known(int64_t B, int64_t H) override;

 private:
  struct Stream {
    std::unique_ptr<RowCoder> enc;  // fits and encodes
    std::unique_ptr<RowCoder> dec;  // rebuilt from the stored header; decodes every chunk
    EncodedSection sec;
    size_t read_pos = 0;            // decoder position in sec.bytes
    std::vector<float> pending;     // [n_pending, W] raw rows (fp16 values once stored)
    int64_t n_pending = 0;
    int64_t n_rounded = 0;          // leading pending rows already rounded to fp16
    int64_t n_encoded = 0;
    int64_t n_sink = 0;             // leading rows kept raw for good (sink_tokens); not in pending
    bool fitted = false;
    int64_t b = 0, h = 0;           // first head covered
    int kv = 0;
  };
  struct HeadBuf {
    std::vector<float> k, v;  // [n, D]
  };

  const Stream& stream(int64_t b, int64_t h, int kv) const;
  int64_t width() const;
  void process(Stream& st);
  void encode_rows(Stream& st, int64_t first, int64_t n);
  void write_header(Stream& st);
  void refresh_view();

  TransformSettings settings_;
  StreamCoderFactory factory_;
  std::vector<Stream> streams_;
  std::vector<HeadBuf> heads_;          // index b * H + h
  std::vector<int64_t> positions_;      // 0..n-1, shared by every head
  std::vector<float> decoded_;          // scratch [chunk, W]
  std::vector<store::Fp32Rows> ksrc_, vsrc_;
};

}  // namespace vq::transform

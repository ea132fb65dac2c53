// The resident form of a KV stream: how one KV head's keys (or values) sit in memory while a
// cache holds them, and the only form attention and eviction policies read.
//
// Every token is one fixed-width row of codes (row_bytes() bytes). A codec is either
//   - row-wise (chunk_rows() == 0): each row is encoded on arrival, on its own (fp16, bf16,
//     q8_0, q4_0); or
//   - chunked (chunk_rows() > 0): rows wait at fp16 in the stream's open window and are encoded
//     chunk_rows() at a time (oldest first), sharing per-chunk parameters of chunk_param_bytes(n)
//     bytes (PCA ranges, KIVI's per-channel key ranges). A fitting codec (fit_rows() > 0) first
//     collects fit_rows() rows and fits its model (a PCA basis) on them; the store then encodes
//     those rows at once in even chunks of at most chunk_rows().
// Within a chunk every row decodes on its own given the chunk's parameters, so a row can be
// dropped (evicted) without touching the others: the store moves the chunk's last row into the
// hole, and frees the chunk with its parameters when its last row goes.
//
// The entropy-coded form (Huffman / range coder, .vqkv files) is the storage form; it is written
// by the transform layer's RowCoder/BlockCodec, never read by attention. A codec may report the
// size its chunks would take in that form (stored_chunk_bytes) so that caches show both.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

namespace vq {
class CacheConfig;
}

namespace vq::store {

/// Which stream a codec is built for.
struct StreamInfo {
  int64_t head_dim = 0;  ///< D: values per row
  int64_t layer = 0;     ///< CacheContext::layer
  int64_t head = 0;      ///< KV head
  int64_t n_heads = 0;   ///< KV heads of the layer
  int kv = 0;            ///< 0 = keys, 1 = values
  uint64_t seed = 0;     ///< per-layer seed (CacheContext::seed)
};

class RowCodec {
 public:
  explicit RowCodec(int64_t dim) : dim_(dim) {}
  virtual ~RowCodec() = default;
  RowCodec(const RowCodec&) = delete;
  RowCodec& operator=(const RowCodec&) = delete;

  /// D: floats per row.
  int64_t dim() const { return dim_; }

  /// The largest magnitude a value may have and still read back finite, and what sets it (a
  /// static string). The default covers the fp16 codec and every chunked codec, whose open window
  /// holds fp16 rows.
  struct ValueRange {
    double max_abs = 65504.0;
    const char* what = "fp16 rows";
  };
  virtual ValueRange value_range() const {
    return {65504.0, chunk_rows() > 0 ? "an open window of fp16 rows" : "fp16 rows"};
  }

  // ---- chunking geometry (constant for the codec's life; K and V codecs of one head must agree)
  /// Rows per chunk; 0 = row-wise (no open window, every row encoded on arrival).
  virtual int64_t chunk_rows() const { return 0; }
  /// Newest rows that stay at fp16 in the open window: a chunk is formed only when at least
  /// this many rows remain in the window after it.
  virtual int64_t recent_rows() const { return 0; }
  /// The first positions a stream sees stay at fp16 in the window for good (attention sinks).
  virtual int64_t sink_rows() const { return 0; }
  /// Rows to collect before fit() (0: nothing to fit).
  virtual int64_t fit_rows() const { return 0; }

  // ---- model
  /// Fit on rows [n, D] (n >= 1; called once, before the first encode, when fit_rows() > 0).
  virtual void fit(const float* rows, int64_t n) { (void)rows, (void)n; }
  /// False until fit() has run for a fitting codec.
  virtual bool fitted() const { return true; }

  // ---- codes (valid once fitted)
  /// Bytes of one encoded row.
  virtual int64_t row_bytes() const = 0;
  /// Bytes of the parameters a chunk of n rows carries (0 for row-wise codecs).
  virtual int64_t chunk_param_bytes(int64_t n) const {
    (void)n;
    return 0;
  }
  /// Encode rows [n, D] (n >= 1; n <= chunk_rows() for chunked codecs, any n for row-wise):
  /// the shared parameters into params (chunk_param_bytes(n) bytes; nullptr when 0) and the
  /// rows into codes (n * row_bytes() bytes, row i at codes + i * row_bytes()).
  virtual void encode(const float* rows, int64_t n, uint8_t* params, uint8_t* codes) = 0;
  /// Decode n rows whose codes lie consecutively at codes (row_bytes() apart) and that share the
  /// chunk parameters at params, into out [n, D]. Rows of one chunk need not be decoded together
  /// or in order. Never reads outside the given bytes.
  virtual void decode(const uint8_t* params, const uint8_t* codes, int64_t n, float* out) const = 0;

  // ---- attention on the codes (rows as decode() gives them; same bytes, same params)
  /// out[i] = (decoded row i) . q for the n rows at codes. A codec whose quantizes_queries() is
  /// true rounds q itself here. Each row's value depends only on its bytes, params and q. Default:
  /// decode() kReadBlock rows at a time into per-thread scratch, then the fp32 row kernel.
  virtual void dot_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* q,
                        float* out) const;
  /// acc[d] += sum_i w[i] * (decoded row i)[d], the rows added in order. Default: through decode()
  /// into per-thread scratch like dot_rows.
  virtual void axpy_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                         float* acc) const;
  /// Codecs whose rows are a fixed linear map of a smaller latent vector per row (the PCA family)
  /// can sum attention-weighted rows in that space across every chunk of a read and map back
  /// once: latent_dim() > 0 is the size of the sum, axpy_latent() adds n rows to it (each chunk
  /// with its own parameters) and unproject_latent() adds the rows it stands for to acc[0, D).
  /// HeadStore::accumulate uses them when latent_dim() > 0; axpy_rows stays the per-call form.
  virtual int64_t latent_dim() const { return 0; }
  virtual void axpy_latent(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                           float* lat) const {
    (void)params, (void)codes, (void)n, (void)w, (void)lat;
  }
  virtual void unproject_latent(const float* lat, float* acc) const { (void)lat, (void)acc; }
  /// dot_rows for nq queries (query j at qs + j * dim(), results at out + j * out_stride), each
  /// with the bits dot_rows gives it alone. Default: dot_rows per query.
  virtual void dot_rows_many(const uint8_t* params, const uint8_t* codes, int64_t n,
                             const float* qs, int64_t nq, float* out, int64_t out_stride) const;
  /// axpy_rows for nw weight rows (weights j at w + j * w_stride, added to acc + j * dim()),
  /// each with the bits axpy_rows gives it alone. Default: axpy_rows per weight row.
  virtual void axpy_rows_many(const uint8_t* params, const uint8_t* codes, int64_t n,
                              const float* w, int64_t w_stride, int64_t nw, float* acc) const;
  /// axpy_latent for nw weight rows (weights j at w + j * w_stride, added to the latent sum at
  /// lat + j * lat_stride), each with the bits axpy_latent gives it alone. Default: per row.
  virtual void axpy_latent_many(const uint8_t* params, const uint8_t* codes, int64_t n,
                                const float* w, int64_t w_stride, int64_t nw, float* lat,
                                int64_t lat_stride) const;

  // ---- what attention must know
  /// True when the codec wants keys before RoPE (the engine rotates what it reads).
  virtual bool wants_pre_rope() const { return false; }
  /// True when attention should round each query to q8_0 blocks of `query_block()` values for
  /// the K.Q product over this (key) stream, as llama.cpp does over a quantized K cache.
  virtual bool quantizes_queries() const { return false; }
  virtual int64_t query_block() const { return 32; }

  // ---- accounting
  /// Bytes the codec itself holds for this stream (a fitted mean and basis, allocation tables),
  /// counted from its buffers' capacities.
  virtual int64_t state_bytes() const { return 0; }
  /// Bytes of a model shared by several streams that this codec reads but does not own (a
  /// calibration's basis). Reported, not counted in the stream's resident bytes.
  virtual int64_t external_bytes() const { return 0; }
  /// Which shared entry external_bytes() describes (-1 = none), so that it is counted once.
  virtual int64_t external_entry() const { return -1; }
  /// Storage-form size (entropy coded) of a chunk's parameters and rows, as a .vqkv section
  /// would hold them; default: the resident size.
  virtual int64_t stored_chunk_bytes(const uint8_t* params, const uint8_t* codes, int64_t n) const {
    (void)params, (void)codes;
    return chunk_param_bytes(n) + n * row_bytes();
  }
  /// Storage-form size of the stream header (e.g. a local PCA basis written once).
  virtual int64_t stored_header_bytes() const { return 0; }

 private:
  int64_t dim_;
};

/// The one codec factory type: what every codec method registers (MethodInfo::make_row_codec).
using RowCodecFactory =
    std::function<std::unique_ptr<RowCodec>(const CacheConfig&, const StreamInfo&)>;

/// fp16 rows (IEEE binary16, round to nearest even). Row-wise by default; `chunk`, `recent`,
/// `sink` and `fit` give it the geometry of a chunked partner codec (svdq's values).
class Fp16Codec final : public RowCodec {
 public:
  explicit Fp16Codec(int64_t dim, int64_t chunk = 0, int64_t recent = 0, int64_t sink = 0,
                     int64_t fit = 0)
      : RowCodec(dim), chunk_(chunk), recent_(recent), sink_(sink), fit_(fit) {}
  int64_t chunk_rows() const override { return chunk_; }
  int64_t recent_rows() const override { return recent_; }
  int64_t sink_rows() const override { return sink_; }
  int64_t fit_rows() const override { return fit_; }
  void fit(const float*, int64_t) override { fitted_ = true; }
  bool fitted() const override { return fit_ == 0 || fitted_; }
  int64_t row_bytes() const override { return 2 * dim(); }
  void encode(const float* rows, int64_t n, uint8_t* params, uint8_t* codes) override;
  void decode(const uint8_t* params, const uint8_t* codes, int64_t n, float* out) const override;
  void dot_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* q,
                float* out) const override;
  void axpy_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                 float* acc) const override;
  void dot_rows_many(const uint8_t* params, const uint8_t* codes, int64_t n, const float* qs,
                     int64_t nq, float* out, int64_t out_stride) const override;
  void axpy_rows_many(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                      int64_t w_stride, int64_t nw, float* acc) const override;

 private:
  int64_t chunk_, recent_, sink_, fit_;
  bool fitted_ = false;
};

/// fp32 rows, exactly as given (4 bytes per value): a cache with no rounding at all, e.g. to
/// compare with an fp32 reference implementation ("full+f32"). Row-wise.
class Fp32Codec final : public RowCodec {
 public:
  explicit Fp32Codec(int64_t dim) : RowCodec(dim) {}
  ValueRange value_range() const override { return {3.4028234663852886e38, "fp32 rows"}; }
  int64_t row_bytes() const override { return 4 * dim(); }
  void encode(const float* rows, int64_t n, uint8_t*, uint8_t* codes) override {
    if (n > 0) std::memcpy(codes, rows, sizeof(float) * static_cast<size_t>(n * dim()));
  }
  void decode(const uint8_t*, const uint8_t* codes, int64_t n, float* out) const override {
    if (n > 0) std::memcpy(out, codes, sizeof(float) * static_cast<size_t>(n * dim()));
  }
  void dot_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* q,
                float* out) const override;
  void axpy_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                 float* acc) const override;
  void dot_rows_many(const uint8_t* params, const uint8_t* codes, int64_t n, const float* qs,
                     int64_t nq, float* out, int64_t out_stride) const override;
  void axpy_rows_many(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                      int64_t w_stride, int64_t nw, float* acc) const override;
};

/// bfloat16 rows (the top 16 bits of the fp32, round to nearest even). Row-wise.
class Bf16Codec final : public RowCodec {
 public:
  explicit Bf16Codec(int64_t dim) : RowCodec(dim) {}
  // round to nearest even overflows past the largest bf16, (2 - 2^-7) 2^127
  ValueRange value_range() const override { return {3.3895313892515355e38, "bf16 rows"}; }
  int64_t row_bytes() const override { return 2 * dim(); }
  void encode(const float* rows, int64_t n, uint8_t* params, uint8_t* codes) override;
  void decode(const uint8_t* params, const uint8_t* codes, int64_t n, float* out) const override;
  void dot_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* q,
                float* out) const override;
  void axpy_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                 float* acc) const override;
  void dot_rows_many(const uint8_t* params, const uint8_t* codes, int64_t n, const float* qs,
                     int64_t nq, float* out, int64_t out_stride) const override;
  void axpy_rows_many(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                      int64_t w_stride, int64_t nw, float* acc) const override;
};

/// Replaces each of n rows (D = c.dim() values, `stride` floats apart) by what the store reads
/// back once it holds the row: encoded and decoded by a row-wise codec; at fp16 for a chunked
/// codec, whose newest rows wait in the fp16 window.
void round_trip_rows(RowCodec& c, float* rows, int64_t n, int64_t stride);

/// fp32 <-> fp16 / bf16 over n values (F16C when the build has it; same rounding as
/// vq::fp32_to_fp16). Unaligned pointers are fine.
void fp32_to_fp16_n(const float* src, uint16_t* dst, int64_t n);
void fp16_to_fp32_n(const uint16_t* src, float* dst, int64_t n);
void fp32_to_bf16_n(const float* src, uint16_t* dst, int64_t n);
void bf16_to_fp32_n(const uint16_t* src, float* dst, int64_t n);

}  // namespace vq::store

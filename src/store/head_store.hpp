// HeadStore: the kept tokens of one KV head, keys and values, in their resident form only.
//
// Slots 0..size()-1 are the tokens held, in the order the owner (an eviction policy) keeps them:
// append() adds slot size(), remove(slot) moves the last slot into `slot`. Each slot's keys and
// values live in one of two places:
//   - the pool: for a row-wise codec, every row, encoded (pool row i is slot i); for a chunked
//     codec, the open window of rows not yet encoded, at fp16;
//   - a chunk: rows encoded together by a chunked codec, with the chunk's parameters.
// Nothing else that grows with the tokens is kept: the store reads rows through the codec into
// the caller's buffer, and bytes() adds up the capacities of the buffers it owns.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "store/buffers.hpp"
#include "store/row_codec.hpp"
#include "veloxquant/row_source.hpp"

namespace vq::store {

/// Resident bytes by kind, from buffer capacities.
struct StoreBytes {
  int64_t content = 0;   ///< K/V codes: encoded rows and the fp16 open window
  int64_t params = 0;    ///< chunk parameters and the codecs' own state (a fitted basis)
  int64_t index = 0;     ///< per-slot bookkeeping: positions, locations, chunk membership
  int64_t scratch = 0;   ///< transient buffers kept for reuse (fp32 input staged for encoding)
  int64_t stored = 0;    ///< the same rows in storage form (entropy coded), for reporting
  int64_t external = 0;  ///< shared model bytes the codecs read but do not own (not resident here)
  int64_t window_rows = 0;   ///< rows in the fp16 open window (chunked codecs)
  int64_t encoded_rows = 0;  ///< rows in chunks (chunked) or in codec form (row-wise)
  int64_t chunks = 0;        ///< live chunks
  StoreBytes& operator+=(const StoreBytes& o);
  int64_t resident() const { return content + params + index + scratch; }
};

class HeadStore {
 public:
  HeadStore();
  /// K and V codecs of one head; their chunk geometry must agree (throws InvalidArgument).
  HeadStore(std::unique_ptr<RowCodec> k, std::unique_ptr<RowCodec> v);
  HeadStore(HeadStore&&) noexcept;
  HeadStore& operator=(HeadStore&&) noexcept;
  ~HeadStore();

  int64_t size() const { return static_cast<int64_t>(pos_.size()); }
  int64_t dim() const { return D_; }
  const int64_t* positions() const { return pos_.data(); }
  int64_t position(int64_t slot) const { return pos_[static_cast<size_t>(slot)]; }

  /// Adds a token (keys k[D], values v[D], absolute position pos) as slot size(). Row-wise codecs
  /// encode it now; chunked codecs keep it in the window until settle() encodes it.
  int64_t append(const float* k, const float* v, int64_t pos);
  /// Drops the token in `slot`: the last slot takes its index; its bytes are released (the pool
  /// row is reused, a chunk that loses its last row is freed).
  void remove(int64_t slot);
  /// Forms the chunks the codecs' rules allow (fit, then chunks of chunk_rows() oldest window
  /// rows while recent_rows() stay). Rows appended since the last settle() are encoded from
  /// their fp32 input, older window rows from their fp16 form.
  void settle();

  /// Decodes slots [first, first + n) of keys (kv = 0) or values (kv = 1) into out [n, D].
  void read(int kv, int64_t first, int64_t n, float* out) const;
  /// out[i] = slot (first + i) . q, computed on the stored bytes by the codec's dot_rows (window
  /// rows of a chunked codec by the fp16 kernel), runs of consecutive rows at a time.
  void dot(int kv, int64_t first, int64_t n, const float* q, float* out) const;
  /// acc[d] += sum_i w[i] * slot (first + i)[d], slots in order, on the stored bytes.
  void accumulate(int kv, int64_t first, int64_t n, const float* w, float* acc) const;
  /// dot / accumulate for several queries or weight rows at once (RowSource::dot_many /
  /// accumulate_many): the codec unpacks each run of rows once for all of them.
  void dot_many(int kv, int64_t first, int64_t n, const float* qs, int64_t nq, float* out,
                int64_t out_stride) const;
  void accumulate_many(int kv, int64_t first, int64_t n, const float* w, int64_t w_stride,
                       int64_t nw, float* acc) const;
  /// The keys / values as RowSources (valid while this store lives; they follow its size).
  const RowSource& keys() const;
  const RowSource& values() const;
  const RowCodec& codec(int kv) const { return *codec_[kv]; }

  /// Rows as this store would read them back once appended (store::round_trip_rows with its
  /// codec for kv), without appending them.
  void round_trip(int kv, float* rows, int64_t n, int64_t stride) {
    round_trip_rows(*codec_[kv], rows, n, stride);
  }

  StoreBytes bytes() const;
  /// Incremented whenever rows change their decoded values (a chunk of the window is encoded),
  /// so that readers caching something per row know to refresh it.
  int64_t generation() const { return generation_; }

 private:
  struct Loc {
    int32_t chunk = -1;  // -1: the pool
    int32_t row = 0;
  };
  /// A chunk's size in storage form, keys and values (RowCodec::stored_chunk_bytes: an
  /// entropy-coding pass over its rows), computed when bytes() first asks and kept until the
  /// chunk's rows change; -1 until then. Without it every bytes() call coded every chunk again, and
  /// a caller that samples stats() per token (eval) spent time quadratic in the context on it.
  /// Atomic because bytes() is const and may run on several threads at once (they store the same
  /// number).
  struct StoredSize {
    mutable std::atomic<int64_t> bytes{-1};
    StoredSize() = default;
    StoredSize(const StoredSize& o) : bytes(o.bytes.load(std::memory_order_relaxed)) {}
    StoredSize& operator=(const StoredSize& o) {
      bytes.store(o.bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
      return *this;
    }
    void reset() { bytes.store(-1, std::memory_order_relaxed); }
  };
  struct Chunk {
    std::vector<uint8_t> params[2], codes[2];
    std::vector<int32_t> owner;  // slot of each row
    int64_t n = 0;
    StoredSize stored;
  };
  class Source;

  bool chunked() const { return chunk_rows_ > 0; }
  /// Rows in the pool: every slot for row-wise codecs, the window rows for chunked ones.
  int64_t pool_rows() const { return pool_[0].rows(); }
  int64_t pool_row_bytes(int kv) const { return chunked() ? 2 * D_ : codec_[kv]->row_bytes(); }
  void drop_pool_row(int32_t row);
  void drop_chunk_row(int32_t c, int32_t row);
  /// Encodes the window rows listed in `rows` (pool row indices, position order) as one chunk.
  void encode_chunk(const std::vector<int32_t>& rows);
  /// fp32 rows of pool rows into buf [rows.size(), D]: staged input if present, else fp16 decode.
  void gather(int kv, const std::vector<int32_t>& rows, std::vector<float>& buf) const;
  void remove_pool_rows(std::vector<int32_t> rows);
  /// Calls fn(params, codes, window, i, m) for maximal runs of slots [first + i, first + i + m)
  /// whose rows lie consecutively in one place (the pool, or one chunk), in slot order; window
  /// is true for fp16 window rows of a chunked codec.
  template <typename Fn>
  void for_each_run(int kv, int64_t first, int64_t n, Fn&& fn) const;
  /// Asks the caches for what the run at `next` (`rows` rows) reads first: its chunk's
  /// parameters unless it is `chunk_now`, and its codes (for_each_run).
  void prefetch_run(int kv, Loc next, int64_t rows, int32_t chunk_now) const;

  int64_t D_ = 0, chunk_rows_ = 0;
  std::unique_ptr<RowCodec> codec_[2];
  std::unique_ptr<Source> src_[2];
  std::vector<int64_t> pos_;  // [slot]
  std::vector<Loc> loc_;      // [slot]
  RowPages pool_[2];          // [pool row] of pool_row_bytes
  std::vector<int32_t> pool_owner_;
  std::vector<Chunk> chunks_;
  std::vector<int32_t> free_chunks_;
  // fp32 input of the rows appended since the last settle(), by position (transient)
  std::vector<float> stage_[2];
  std::vector<uint8_t> stage_ok_;
  int64_t stage_pos0_ = 0, stage_n_ = 0;
  int64_t generation_ = 0;
};

}  // namespace vq::store

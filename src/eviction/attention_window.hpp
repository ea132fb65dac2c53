// Helpers shared by the window- and prompt-based eviction methods (snapkv, morphkv, kvzip,
// tova): a ring of the last W probe vectors, causal softmax over a head's kept keys, the fused
// attention a window of probes places on each kept token, and a base class that scores the kept
// rows together with a whole incoming chunk and keeps the best of them in one round.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "eviction/eviction_cache.hpp"

namespace vq::eviction {

/// The last `window` probes of one head, oldest first. A probe is the G true query rows of a
/// token (when supplied and wanted) or else its key (1 row); each row has D floats.
class ProbeRing {
 public:
  /// Empties the ring and sizes it for `window` probes of head_dim D.
  void reset(int64_t window, int64_t D);
  /// Adds the probe of the token at `pos` (dropping the oldest when full).
  void push(int64_t pos, const float* key, const QueryRows& q, bool use_queries);
  int64_t size() const { return count_; }
  int64_t window() const { return W_; }
  /// Entry i, 0 = oldest, size() - 1 = newest.
  int64_t pos(int64_t i) const { return pos_[slot(i)]; }
  int64_t rows(int64_t i) const { return rows_[slot(i)]; }
  const float* row(int64_t i, int64_t g) const { return data_.data() + row_index(i, g) * D_; }
  /// Storage as a matrix [row_capacity(), D]; row row_index(i, g) is row g of entry i (rows of
  /// unused entries hold stale data).
  const float* data() const { return data_.data(); }
  int64_t row_capacity() const { return W_ * gcap_; }
  int64_t bytes() const { return buffer_bytes(data_) + buffer_bytes(pos_) + buffer_bytes(rows_); }
  int64_t row_index(int64_t i, int64_t g) const {
    return static_cast<int64_t>(slot(i)) * gcap_ + g;
  }

 private:
  size_t slot(int64_t i) const { return static_cast<size_t>((start_ + i) % W_); }
  void grow_rows(int64_t g);

  int64_t W_ = 0, D_ = 0, gcap_ = 1, start_ = 0, count_ = 0;
  std::vector<float> data_;  // [W, gcap, D]
  std::vector<int64_t> pos_, rows_;
};

/// Reusable buffers for the attention helpers below (grown, never shrunk: no allocation per
/// token once a head has reached its budget).
struct AttnScratch {
  std::vector<float> prod;       // [n] raw logits
  std::vector<double> tmp, acc;  // [n]
  std::vector<double> out;       // [n] the result
  RowMatF logits;                // [probe rows, >= n] logits of a whole window (one GEMM)
  std::vector<int64_t> hidden;   // rows newer than the oldest probe (the only maskable ones)
  std::vector<std::pair<double, const float*>> terms;  // (weight, row) a score sum takes in order
  int64_t bytes() const {
    return buffer_bytes(prod) + buffer_bytes(tmp) + buffer_bytes(acc) + buffer_bytes(out) +
           buffer_bytes(logits) + buffer_bytes(hidden) + buffer_bytes(terms);
  }
  void ensure(int64_t n) {
    const size_t m = static_cast<size_t>(n);
    if (out.size() >= m) return;
    prod.resize(m);
    tmp.resize(m);
    acc.resize(m);
    out.resize(m);
  }
};

/// x[i] = exp(x[i] - mx) for i < n in float, every element through the same vector kernel
/// whatever x's address or n (equal inputs give equal outputs; ties stay ties).
void exp_shifted_f(float* x, int64_t n, float mx);
/// sum of x[0, n) in double with eight partial sums in a fixed order (same bits wherever x sits).
double sum_fixed(const float* x, int64_t n);
/// The softmax's tail that every attention-driven policy shares: x[i] <- exp(x[i] - mx) in float
/// (exp_shifted_f), then out[i] = double(x[i]) * (1 / sum_fixed(x, n)), for i < n. mx is the
/// largest x[i]; a non-finite one (a +inf or NaN logit) makes every weight NaN, as a softmax
/// in double did.
void normalize_exp(float* x, int64_t n, float mx, double* out);

/// out[0:n] = softmax over the rows i < n with pos[i] <= max_pos of (K[i] . q) * scale; the rows
/// after max_pos get 0 (causal mask; pos == nullptr means nothing is masked). When every row is
/// masked, out is all zero. prod: scratch of n floats. Same arithmetic as softmax_logits (the
/// logits scaled in float, then normalize_exp).
void causal_softmax(const store::RowSource& K, int64_t n, const int64_t* pos, int64_t max_pos,
                    const float* q, float scale, double* out, float* prod);

/// The attention of the current token over the n kept rows, into s.out: the mean over its G
/// true query rows of softmax(K q_g / sqrt(D)) when supplied and use_queries, else the
/// key-as-query proxy softmax(K k / sqrt(D)). The same quantity as driving_attention, computed
/// without allocating; identical, bit for bit, to window_attention with the token as only probe.
void step_attention(const store::RowSource& K, int64_t n, const float* k, const QueryRows& q,
                    bool use_queries, AttnScratch& s);

enum class Fusion : int { Sum = 0, Max = 1 };

/// Attention the ring's probes place on the n kept rows of K, into s.out:
///   a_w = mean over the rows g of probe w of causal_softmax(K, q_{w,g} / sqrt(D)),
///   out = sum_w a_w (Fusion::Sum) or max_w a_w (Fusion::Max).
/// A probe only sees rows at or before its own position. Only the probes from entry `first`
/// (0 = oldest) on are used. A single probe goes through step_attention's arithmetic (so a
/// one-token window is bit-identical to it); several probes share one GEMM for their logits.
void window_attention(const store::RowSource& K, int64_t n, const int64_t* pos,
                      const ProbeRing& ring, Fusion fusion, AttnScratch& s, int64_t first = 0);

/// Writes to `victims` the `m` indices in [0, T) with the lowest (score, position), skipping
/// positions below n_sink; fewer when not enough are evictable. `order` is scratch.
void lowest_evictable(const double* score, const int64_t* pos, int64_t T, int64_t n_sink, int64_t m,
                      std::vector<int64_t>& order, std::vector<int64_t>& victims);

/// An eviction cache that can score the kept rows of a head together with a whole incoming chunk
/// and keep the best `budget` of them in one round (SnapKV's prompt compression, KVzip's
/// context scoring), without ever storing more than the budget.
class ChunkScoringCache : public EvictionCache {
 public:
  using EvictionCache::EvictionCache;

 protected:
  /// One round's working set (one per thread: heads run in parallel).
  struct Chunk {
    std::unique_ptr<store::RowSource> chunk_rows, all_K;  // kept keys then the chunk's
    std::vector<int64_t> all_pos;                         // [T]
    std::vector<char> drop;                               // [T]
    std::vector<int64_t> order, victims;
    std::vector<double> score;  // [T] the round's scores (the method fills it)
    AttnScratch attn;
  };
  /// The calling thread's working set.
  Chunk& chunk() { return chunk_.local(); }
  /// Makes chunk().all_K read the st.n kept rows (slot order) then the S chunk rows (K stays the
  /// caller's until commit), and fills chunk().all_pos. Returns T = st.n + S. Row t < st.n is
  /// slot t; row st.n + s is chunk token s.
  int64_t gather(const HeadState& st, const float* K, int64_t S, int64_t pos0);
  /// Applies a decision over the gathered rows: rows flagged in chunk().drop leave, the others
  /// stay (kept slots and appended chunk rows) with score[t] as their new retention score.
  void commit(HeadState& st, const float* K, const float* V, int64_t S, int64_t pos0,
              const double* score);
  /// Flags for chunk().drop the rows listed in chunk().victims (clearing the other flags first).
  void mark_victims(int64_t T);

 private:
  Scratch<Chunk> chunk_;
};

}  // namespace vq::eviction

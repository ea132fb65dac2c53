// Shared machinery of the eviction family, and the cache every method runs on: per-(batch, head)
// slots with absolute positions and the policy's scores, the kept keys/values in a HeadStore
// (their resident form: fp16 rows by default, or the codec of a composed spec such as
// "snapkv:budget=256+q4_0"), O(D) removal (the last slot moves into the freed one), and the
// token-by-token update loop most methods use. Memory follows the tokens held: nothing is sized
// by the budget.
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "eviction/argmin.hpp"
#include "store/head_store.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/row_source.hpp"

namespace vq {
class OneShotScorer;
}

namespace vq::eviction {

using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Allocated bytes of a policy buffer (capacity, not size).
template <typename T>
int64_t buffer_bytes(const std::vector<T>& v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}
template <typename Derived>
int64_t buffer_bytes(const Eigen::PlainObjectBase<Derived>& m) {
  return static_cast<int64_t>(m.size()) * static_cast<int64_t>(sizeof(typename Derived::Scalar));
}

/// The query rows that belong to one KV head for one token: G rows of D floats,
/// row g at base + g * stride. G == 0 means no queries were supplied.
struct QueryRows {
  const float* base = nullptr;
  int64_t G = 0;
  int64_t stride = 0;
  const float* row(int64_t g) const { return base + g * stride; }
};

/// One (batch, head) of kept tokens. Slots [0, n) are live.
struct HeadState {
  store::HeadStore kv;        // keys, values and positions (kv.position(slot)), resident form
  std::vector<double> score;  // [n] the method's retention score (empty unless keeps_scores())
  std::vector<double> aux;    // [n] a second per-token value (e.g. update counts)
  int64_t n = 0;
  size_t index = 0;    // b * H + h
  int64_t budget = 0;  // this head's budget under head-adaptive budgets (0: the cache's)
};

/// Working buffers a method reuses from token to token (attention rows, decoded blocks, GEMM
/// outputs). They belong to the thread that processes a head, not to a cache: one T per thread
/// and method, shared by every cache of that method the thread runs (a model's layers do not each
/// hold a copy, as the kernels' blocks), so heads can be processed on several threads at once
/// (EvictionCache::do_update) and a cache's kept_bytes counts only what the cache itself holds.
/// What a head leaves in the buffers must never matter to the next one (written before read):
/// results do not depend on which thread ran which head.
template <typename T>
class Scratch {
 public:
  /// The calling thread's buffers.
  T& local() {
    thread_local T t;
    return t;
  }
  T* operator->() { return &local(); }
};

class EvictionCache : public KVCache {
 public:
  /// budget: most tokens kept per head (0 = unbounded). n_sink: positions < n_sink never evicted.
  EvictionCache(CacheConfig config, CacheContext ctx, int64_t budget, int64_t n_sink);
  ~EvictionCache() override;

  int64_t budget() const { return budget_; }
  int64_t n_sink() const { return n_sink_; }
  /// Head-adaptive budgets (AdaKV): option heads=adaptive of the method's spec, or set by the
  /// prefill protocol. safeguard: the fraction of the per-head budget every head keeps.
  bool adaptive_heads() const { return adaptive_; }
  void set_adaptive_heads(bool on, double safeguard);
  /// One-shot compression of the first multi-token update (the prefill protocol with the
  /// decode-time policy kept on): the context is scored once by `scorer` and each head keeps
  /// int(S * (1 - ratio)) tokens (spread by AdaKV when adaptive); those become the head budgets,
  /// and every later token goes through the method's own decode-time policy.
  void compress_first_context(std::unique_ptr<OneShotScorer> scorer, double ratio, bool adaptive,
                              double safeguard);
  /// Read access to one head's state (tests, diagnostics).
  const HeadState& head_state(int64_t b, int64_t h) const {
    return heads_[static_cast<size_t>(b * kv_heads() + h)];
  }
  /// The kept keys / values of a head (rows [0, st.n), slot order), decoded block by block.
  /// Policies read stored rows only through these.
  const store::RowSource& keys(const HeadState& st) const { return st.kv.keys(); }
  const store::RowSource& values(const HeadState& st) const { return st.kv.values(); }

  const store::RowSource& keys(int64_t b, int64_t h) const override;
  const store::RowSource& values(int64_t b, int64_t h) const override;
  const int64_t* positions(int64_t b, int64_t h) const override;
  int64_t kept(int64_t b, int64_t h) const override;
  /// Through the head's codec (a codec probe for head h before the first update).
  void round_as_stored(int kv, int64_t h, float* rows, int64_t n, int64_t stride) override;
  bool wants_pre_rope_keys() const override;
  /// fp16 rows, or what the codec holds (the smaller of its key and value streams').
  StorableRange storable_range() const override { return range_; }
  bool quantizes_queries(int64_t* block) const override;
  CacheStats stats() const override;

 protected:
  void do_update(const Tensor& keys, const Tensor& values, const Tensor* queries) override;
  void on_shape_known(int64_t B, int64_t H) override;

  /// Process the S new tokens of one head. K, V: [S, D] row-major; queries for token s are
  /// q_of(s). pos0 is the first new position. Default: on_token() for each token in order.
  virtual void process_head(HeadState& st, const float* K, const float* V,
                            const std::vector<QueryRows>& q, int64_t S, int64_t pos0);
  /// Handle one token (append, score, evict). Used by the default process_head.
  virtual void on_token(HeadState& st, const float* k, const float* v, const QueryRows& q,
                        int64_t pos) {}

  /// Append a row (grows capacity when unbounded). Returns its slot.
  int64_t append(HeadState& st, const float* k, const float* v, int64_t pos, double score,
                 double aux = 0.0);
  /// Remove the row in `slot`; the last live row moves into it.
  void remove_slot(HeadState& st, int64_t slot);
  /// Slot with the lowest score (score / den when `den` is not null, den[slot] dividing
  /// score[slot]) among rows that are not sinks and whose position is below `protect_from` (the
  /// start of a protected recent window). Ties go to the lowest position. Returns -1 when nothing
  /// is evictable. Vectorized, the same slot as one ordered pass (eviction/argmin.hpp).
  int64_t argmin_score(const HeadState& st, int64_t protect_from,
                       const double* den = nullptr) const {
    return argmin_in_window(st.score.data(), den, st.kv.positions(), st.n, n_sink_, protect_from);
  }
  /// True while the head holds more than its budget: the cache's, or under head-adaptive budgets
  /// (option heads=adaptive) the head's share of the layer's H * budget.
  bool over_budget(const HeadState& st) const {
    const int64_t b = adaptive_ && st.budget > 0 ? st.budget : budget_;
    return b > 0 && st.n > b;
  }
  /// Told after each eviction: slot `removed` left and the last slot `last` (the newest row)
  /// moved into it (removed == last: nothing moved). For per-slot state a method keeps itself.
  using SlotMoved = std::function<void(int64_t removed, int64_t last)>;
  /// Evicts the lowest-scored evictable slot (argmin_score(st, protect_from)) until the head is
  /// within its budget or nothing is evictable, calling `moved` (if set) after each eviction.
  void evict_lowest(HeadState& st, int64_t protect_from, const SlotMoved& moved = {});
  /// The value head-adaptive budgets rank a slot by (higher = kept): st.score by default.
  virtual double retention(const HeadState& st, int64_t slot) const {
    return st.score[static_cast<size_t>(slot)];
  }
  /// Index b * H + h of a head's state, for methods that keep extra per-head state. Heads run
  /// in parallel (do_update): per-head state is indexed by it, shared scratch is a Scratch<T>.
  size_t head_index(const HeadState& st) const { return st.index; }
  /// Bytes of per-token and per-head state the method keeps beyond HeadState (score buffers,
  /// projections, probe windows), from its buffers' capacities. Per-thread Scratch is not the
  /// cache's and is not counted.
  virtual int64_t policy_bytes() const { return 0; }
  /// False for methods that never read st.score / st.aux (full, the one-shot cache): append() then
  /// keeps no per-slot scores.
  virtual bool keeps_scores() const { return true; }

 private:
  // Runs process_head (then settle) for heads [i0, i1) of the flat b * H + h order.
  void run_heads(const Tensor& keys, const Tensor& values, const Tensor* queries, int64_t i0,
                 int64_t i1);
  // AdaKV between updates: each head's budget for the next token, from the layer's scores.
  void redistribute(int64_t b);
  // The first multi-token update under compress_first_context().
  void compress_context(const Tensor& keys, const Tensor& values, const Tensor* queries);

  int64_t budget_;
  int64_t n_sink_;
  bool adaptive_ = false;
  double safeguard_ = 0.2;
  std::unique_ptr<OneShotScorer> one_shot_;  // until the context is compressed
  double one_shot_ratio_ = 0;
  bool one_shot_adaptive_ = false;
  double one_shot_safeguard_ = 0.2;
  struct RankEntry {
    double r;
    int64_t pos, head;
  };
  std::vector<RankEntry> rank_;              // scratch of redistribute()
  std::vector<int64_t> rank_order_;          // scratch of redistribute()
  bool pre_rope_ = false, quant_q_ = false;  // what the codec asks of attention
  StorableRange range_;                      // fp16 rows unless the codec holds another range
  int64_t q_block_ = 32;
  std::vector<HeadState> heads_;
  struct QueryScratch {
    std::vector<QueryRows> rows;
  };
  Scratch<QueryScratch> qrows_;  // one head's query rows per token
};

/// out[i] = K[i] . q for i < n (n <= K.rows()), K read block by block.
void row_dots(const store::RowSource& K, int64_t n, const float* q, float* out);
/// K[i] . q, bit-identical to row_dots' out[i] (both use K.dot).
float row_dot(const store::RowSource& K, int64_t i, const float* q);
/// L[r, i] = P[r] . K[i] for r < R, i < n: P [R, D] row-major, L row-major with row stride ld.
void rows_times_keys(const store::RowSource& K, int64_t n, const float* P, int64_t R, float* L,
                     int64_t ld);

/// Softmax of (K[0:n] @ q) * scale into out[0:n]: exponentials in float, the normaliser
/// accumulated in double (normalize_exp, attention_window.hpp).
void softmax_logits(const store::RowSource& K, int64_t n, const float* q, float scale, double* out);

/// Attention that drives a score-based method for one incoming token, over K[0:n]:
/// with true queries (q.G > 0, use_queries) the mean over the G query heads of each head's
/// softmax(K q_g / sqrt(D)); otherwise the key-as-query proxy softmax(K k / sqrt(D)).
/// `tmp` is scratch of at least n doubles.
void driving_attention(const store::RowSource& K, int64_t n, const float* k, const QueryRows& q,
                       bool use_queries, double* out, double* tmp);

/// driving_attention with true queries (q.G >= 1), keeping each head's own softmax too:
/// heads[g * n + i] for g < q.G, i < n; out[0:n] their mean, the same bits as driving_attention.
void driving_attention_heads(const store::RowSource& K, int64_t n, const QueryRows& q, double* out,
                             double* heads);

}  // namespace vq::eviction

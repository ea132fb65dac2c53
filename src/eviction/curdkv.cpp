// `curdkv`: value-aware eviction by energy-weighted leverage scores (spec: curdkv.txt).
// For each incoming token (prefill and decode alike):
//   1. attention a of the incoming key (or the true queries) over the stored keys;
//   2. weighted values W = a ⊙ V (row i scaled by a_i);
//   3. leverage l_i of each row of W over its top min(rank_cap, n, D) singular directions;
//   4. cumulative score += l; the newcomer is seeded with its own leverage inside the enlarged
//      block it joins (its key attends to itself too);
//   5. over budget, evict the lowest score outside the first n_sink positions and the last
//      `recent` positions (recent = 0, the spec's rule, protects no recent window).
// One-shot scoring (the prefill protocol): curdkv_one_shot.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "core/options.hpp"
#include "eviction/eviction_cache.hpp"
#include "eviction/heavy_leverage.hpp"
#include "eviction/leverage.hpp"

using vq::eviction::SubspaceLeverage;
#include "eviction/methods.hpp"
#include "eviction/one_shot.hpp"
#include "veloxquant/errors.hpp"

namespace vq {
namespace {

class CurDKVCache final : public eviction::EvictionCache {
 public:
  CurDKVCache(const CacheConfig& c, const CacheContext& ctx)
      : EvictionCache(c, ctx, c.get_int("budget"), c.get_int("n_sink")),
        rank_cap_(c.get_int("rank_cap")),
        recent_(c.get_int("recent")),
        mean_score_(c.get_string("score") == "mean"),
        use_queries_(c.get_string("query") == "true"),
        refresh_(c.get_int("refresh")),
        reference_(c.get_string("solver") == "reference"),
        heavy_(c.get_string("solver") == "heavy"),
        heavy_limits_{c.get_float("heavy_mass"), c.get_int("heavy_rows"), c.get_int("sweep"),
                      c.get_int("refresh")},
        solver_(c.get_string("solver") == "fast" ? eviction::LeverageSolver::one_iteration
                                                 : eviction::LeverageSolver::converged) {}

 protected:
  void on_token(eviction::HeadState& st, const float* k, const float* v,
                const eviction::QueryRows& q, int64_t pos) override {
    if (reference_) {
      on_token_reference(st, k, v, q, pos);
    } else if (heavy_) {
      on_token_heavy(st, k, v, q, pos);
    } else {
      on_token_fast(st, k, v, q, pos);
    }
    const int64_t protect_from =
        recent_ > 0 ? pos + 1 - recent_ : std::numeric_limits<int64_t>::max();
    while (over_budget(st)) {  // step 5: sinks and the recent window (if any) stay
      const int64_t victim =
          argmin_score(st, protect_from, mean_score_ ? st.aux.data() : nullptr);  // retention
      if (victim < 0) break;
      const int64_t last = st.n - 1;
      remove_slot(st, victim);  // the last row moves into the victim's slot
      if (fast_path()) trackers_[head_index(st)].row_moved(last, victim);
      if (heavy_) heavy_trackers_[head_index(st)].row_moved(last, victim);
    }
  }

  double retention(const eviction::HeadState& st, int64_t i) const override {
    const double s = st.score[static_cast<size_t>(i)];
    return mean_score_ ? s / st.aux[static_cast<size_t>(i)] : s;
  }

 protected:
  void on_shape_known(int64_t B, int64_t H) override {
    EvictionCache::on_shape_known(B, H);
    trackers_.assign(static_cast<size_t>(B * H), SubspaceLeverage(solver_));
    for (auto& t : trackers_) t.set_refresh(refresh_);
    heavy_trackers_.assign(heavy_ ? static_cast<size_t>(B * H) : 0,
                           eviction::HeavyLeverage(heavy_limits_));
    generation_.assign(static_cast<size_t>(B * H), 0);
  }

 private:
  // The spec's steps 1-4 literally: two full SVDs per token (the oracle).
  void on_token_reference(eviction::HeadState& st, const float* k, const float* v,
                          const eviction::QueryRows& q, int64_t pos) {
    Buffers& w = scratch_.local();
    if (st.n > 0) {
      weighted_block(st, st.n, k, q);
      eviction::leverage_reference(w.W.data(), st.n, head_dim(), rank_cap_, w.lev.data());
      accumulate(st);
    }
    const int64_t slot = append(st, k, v, pos, 0.0, 1.0);
    weighted_block(st, st.n, k, q);
    eviction::leverage_reference(w.W.data(), st.n, head_dim(), rank_cap_, w.lev.data());
    st.score[static_cast<size_t>(slot)] = w.lev[static_cast<size_t>(slot)];
  }

  // Same quantities without an SVD (see SubspaceLeverage). The seed reuses the Gram matrix of
  // the stored block whenever the enlarged block is an exact rescaling of it plus one row.
  void on_token_fast(eviction::HeadState& st, const float* k, const float* v,
                     const eviction::QueryRows& q, int64_t pos) {
    const int64_t D = head_dim();
    Buffers& w = scratch_.local();
    SubspaceLeverage& lev = trackers_[head_index(st)];
    const bool had_stored = st.n > 0;
    // Encoding a chunk of the window changes the decoded values of its rows: the tracker's
    // per-slot projections of V are stale then.
    if (generation_[head_index(st)] != st.kv.generation()) {
      lev.invalidate();
      generation_[head_index(st)] = st.kv.generation();
    }
    std::optional<SubspaceLeverage::Block> block;  // the scored block; it seeds the newcomer
    if (had_stored) {
      if (fast_path()) {  // the tracker works on W = a ⊙ V without forming it, reusing V Q per slot
        drive(st, st.n, k, q);
        block = lev.stored_scaled(values(st), w.attn.data(), st.n, rank_cap_, w.lev.data());
      } else {
        weighted_block(st, st.n, k, q);
        block = lev.stored(w.W, st.n, rank_cap_, w.lev.data());
      }
      accumulate(st);
    }
    const int64_t slot = append(st, k, v, pos, 0.0, 1.0);
    if (fast_path()) lev.row_replaced(slot);
    const int64_t n = st.n;
    // The proxy (or a single query head) gives a'_i = (1 - a'_new) a_i for the old rows.
    const bool proportional = had_stored && (!use_queries_ || q.G <= 1);
    double seed;
    if (proportional) {
      const double a_new = newcomer_attention(st, slot, k, q);
      seed = std::move(*block).seed_scaled(1.0 - a_new, weighted_newcomer(st, slot, a_new), D);
    } else if (had_stored && fast_path()) {
      // several query heads: the old rows' new weights are not one common rescaling, but they
      // keep their slots, so the seed reweights the scored block's per-slot projections
      enlarged_weights(st, slot, q);
      const double a_new = w.attn[static_cast<size_t>(slot)];
      seed =
          std::move(*block).seed_reweighted(w.attn.data(), weighted_newcomer(st, slot, a_new), D);
    } else {
      weighted_block(st, n, k, q);
      seed = lev.last_row(w.W, n, rank_cap_);
    }
    st.score[static_cast<size_t>(slot)] = seed;
  }

  // solver=heavy: the leverage from the rows that hold the block's energy (HeavyLeverage), the
  // same attention and seeding as the fast path.
  void on_token_heavy(eviction::HeadState& st, const float* k, const float* v,
                      const eviction::QueryRows& q, int64_t pos) {
    const int64_t D = head_dim();
    Buffers& w = scratch_.local();
    eviction::HeavyLeverage& lev = heavy_trackers_[head_index(st)];
    if (generation_[head_index(st)] != st.kv.generation()) {  // encoded rows decode differently
      lev.invalidate();
      generation_[head_index(st)] = st.kv.generation();
    }
    const bool had_stored = st.n > 0;
    if (had_stored) {
      drive(st, st.n, k, q);
      lev.score(values(st), w.attn.data(), st.n, rank_cap_, w.lev.data());
      accumulate(st);
    }
    const int64_t slot = append(st, k, v, pos, 0.0, 1.0);
    lev.row_replaced(slot);
    if (!had_stored) {  // a lone row holds all of its block's energy
      w.vrow.resize(static_cast<size_t>(D));
      values(st).read(slot, 1, w.vrow.data());
      bool nonzero = false;
      for (float x : w.vrow) nonzero = nonzero || x != 0.0f;
      st.score[static_cast<size_t>(slot)] = nonzero ? 1.0 : 0.0;
      return;
    }
    if (!use_queries_ || q.G <= 1) {  // the old rows' weights scale by 1 - a'_new
      const double a_new = newcomer_attention(st, slot, k, q);
      st.score[static_cast<size_t>(slot)] =
          lev.seed_scaled(1.0 - a_new, weighted_newcomer(st, slot, a_new), D, rank_cap_);
      return;
    }
    // several query heads: the enlarged block's weights from each head's scored weights and two
    // logits (the store encodes window rows only when it settles, after this update, so the old
    // rows' keys are still those the scoring pass read)
    enlarged_weights(st, slot, q);
    const double a_new = w.attn[static_cast<size_t>(slot)];
    st.score[static_cast<size_t>(slot)] =
        lev.seed_reweighted(w.attn.data(), weighted_newcomer(st, slot, a_new), D, rank_cap_);
  }

  // This thread's w.attn[0, n) = the driving attention of this token over K[0, n) (w.lev sized
  // for the scores of those rows).
  void drive(const eviction::HeadState& st, int64_t n, const float* k,
             const eviction::QueryRows& q) {
    Buffers& w = scratch_.local();
    w.attn.resize(static_cast<size_t>(n));
    w.tmp.resize(static_cast<size_t>(n));
    w.lev.resize(static_cast<size_t>(n));
    if (use_queries_ && q.G > 1) {  // each head's own weights kept for the seed (enlarged_weights)
      w.heads.resize(static_cast<size_t>(q.G * n));
      eviction::driving_attention_heads(keys(st), n, q, w.attn.data(), w.heads.data());
    } else {
      eviction::driving_attention(keys(st), n, k, q, use_queries_, w.attn.data(), w.tmp.data());
    }
  }

  // w.attn[0, slot] = the driving attention over the enlarged block [0, slot] (the newcomer in
  // `slot`) with several query heads, without another pass over the keys: within each head the
  // old rows' weights scale by 1 - that head's a'_new (newcomer_share), and the mean over heads
  // is taken as drive() takes it. w.heads holds drive()'s per-head weights over [0, slot).
  void enlarged_weights(const eviction::HeadState& st, int64_t slot, const eviction::QueryRows& q) {
    Buffers& w = scratch_.local();
    const auto n0 = static_cast<size_t>(slot);
    w.tmp.assign(n0 + 1, 0.0);
    for (int64_t g = 0; g < q.G; ++g) {
      const double* a = w.heads.data() + static_cast<size_t>(g) * n0;
      const double c = newcomer_share(st, a, slot, q.row(g));
      for (size_t i = 0; i < n0; ++i) w.tmp[i] += (1.0 - c) * a[i];
      w.tmp[n0] += c;
    }
    const auto G = static_cast<double>(q.G);
    for (double& x : w.tmp) x /= G;
    w.attn.swap(w.tmp);
  }

  // w.wnew = a_new times the newcomer's value as the store holds it (the rows of W are stored
  // values); returns its D values.
  const double* weighted_newcomer(const eviction::HeadState& st, int64_t slot, double a_new) {
    const int64_t D = head_dim();
    Buffers& w = scratch_.local();
    w.vrow.resize(static_cast<size_t>(D));
    values(st).read(slot, 1, w.vrow.data());
    w.wnew.resize(D);
    for (int64_t d = 0; d < D; ++d)
      w.wnew(d) = a_new * static_cast<double>(w.vrow[static_cast<size_t>(d)]);
    return w.wnew.data();
  }

  // The newcomer's share a'_new of the attention over the enlarged block [0, n0] (slot = n0),
  // from the scored block's attention attn[0, n0) and two logits instead of another pass:
  // for any stored j, sum_i exp(s_i - s_new) = exp(s_j - s_new) / a_j, so
  // a'_new = 1 / (1 + exp(s_j - s_new) / a_j); j = the largest a_j keeps the division exact.
  double newcomer_attention(const eviction::HeadState& st, int64_t slot, const float* k,
                            const eviction::QueryRows& q) {
    const float* qv = use_queries_ && q.G == 1 ? q.row(0) : k;
    return newcomer_share(st, scratch_->attn.data(), slot, qv);
  }

  // a'_new for one query vector qv from its softmax a[0, slot) over the stored rows.
  double newcomer_share(const eviction::HeadState& st, const double* a, int64_t slot,
                        const float* qv) const {
    // the first largest weight: its value by a vectorized reduction (a maximum does not depend
    // on the order it is taken in), then its first position
    const double top = Eigen::Map<const Eigen::VectorXd>(a, slot).maxCoeff();
    int64_t j = std::find(a, a + slot, top) - a;
    if (j >= slot) j = 0;  // no weight equals it (a NaN): any stored row is as good
    const double scale = static_cast<double>(1.0f / std::sqrt(static_cast<float>(head_dim())));
    const double s_j = static_cast<double>(eviction::row_dot(keys(st), j, qv)) * scale;
    const double s_new = static_cast<double>(eviction::row_dot(keys(st), slot, qv)) * scale;
    return 1.0 / (1.0 + std::exp(s_j - s_new) / a[j]);
  }

  void accumulate(eviction::HeadState& st) {
    const Buffers& w = scratch_.local();
    for (int64_t i = 0; i < st.n; ++i) {
      st.score[static_cast<size_t>(i)] += w.lev[static_cast<size_t>(i)];
      st.aux[static_cast<size_t>(i)] += 1.0;
    }
  }

 private:
  // W[0, n) = a ⊙ V[0, n), a = driving attention of this token over K[0, n).
  void weighted_block(const eviction::HeadState& st, int64_t n, const float* k,
                      const eviction::QueryRows& q) {
    const int64_t D = head_dim();
    Buffers& w = scratch_.local();
    w.attn.resize(static_cast<size_t>(n));
    w.tmp.resize(static_cast<size_t>(n));
    w.lev.resize(static_cast<size_t>(n));
    // the buffers are the thread's, shared with caches of other head_dims: the width first
    if (w.W.cols() != D) w.W.resize(0, D);
    if (w.W.rows() < n) w.W.resize(std::max<int64_t>(n, 2 * w.W.rows()), D);
    eviction::driving_attention(keys(st), n, k, q, use_queries_, w.attn.data(), w.tmp.data());
    store::for_each_block(values(st), w.blk, [&](int64_t first, int64_t m, const float* rows) {
      for (int64_t j = 0; j < m; ++j)
        w.W.row(first + j) = static_cast<double>(w.attn[static_cast<size_t>(first + j)]) *
                             Eigen::Map<const Eigen::RowVectorXf>(rows + j * D, D).cast<double>();
    });
  }

  int64_t rank_cap_;
  int64_t recent_;
  bool mean_score_;
  bool use_queries_;
  int64_t refresh_;
  bool reference_;
  bool heavy_;
  eviction::HeavyLimits heavy_limits_;
  eviction::LeverageSolver solver_;
  // solver=fast: the one-iteration tracker on the stored values, told about every slot change
  bool fast_path() const {
    return !reference_ && solver_ == eviction::LeverageSolver::one_iteration;
  }
  struct Buffers {
    std::vector<double> attn, tmp, lev;
    std::vector<double> heads;  // [G, n] each query head's driving attention (several heads)
    Eigen::VectorXd wnew;
    eviction::RowMatD W;      // Eigen-owned (aligned): reductions do not depend on input addresses
    std::vector<float> blk;   // one decoded block of V
    std::vector<float> vrow;  // one decoded value row
  };
  eviction::Scratch<Buffers> scratch_;
  std::vector<SubspaceLeverage> trackers_;
  std::vector<eviction::HeavyLeverage> heavy_trackers_;  // solver=heavy
  std::vector<int64_t> generation_;  // per head: the store generation the trackers last saw
  int64_t policy_bytes() const override {
    int64_t b = eviction::buffer_bytes(trackers_) + eviction::buffer_bytes(generation_);
    for (const auto& t : trackers_) b += t.bytes();
    b += eviction::buffer_bytes(heavy_trackers_);
    for (const auto& t : heavy_trackers_) b += t.bytes();
    return b;
  }
};

}  // namespace

MethodInfo curdkv_method_info() {
  MethodInfo m;
  m.id = "curdkv";
  m.family = Family::Eviction;
  m.description =
      "value-aware eviction: cumulative leverage score of the attention-weighted value block";
  m.options = {
      eviction::budget_option(),
      eviction::n_sink_option(),
      opt_int("rank_cap", 16, 1, 65536, "leading singular directions in each leverage estimate"),
      opt_int("recent", 0, 0, kMaxBudget, "most recent positions that are never evicted"),
      opt_choice("score", "cumulative", {"cumulative", "mean"},
                 "eviction key: summed leverage, or leverage per update received"),
      opt_choice("query", "true", {"true", "proxy"},
                 "attention source: true queries when supplied, or the key-as-query proxy"),
      opt_int("refresh", 1, 1, 4096,
              "solver=fast or heavy: iterate the leverage subspace every this many tokens (1: "
              "every token); in between, tokens are scored against the last basis"),
      opt_choice("solver", "heavy", {"heavy", "fast", "exact", "reference"},
                 "leverage routine: subspace tracked on the rows holding the energy (heavy), "
                 "tracked on every row (fast), converged Gram subspace (exact), or the full-SVD "
                 "oracle"),
      opt_float("heavy_mass", "0.99", 0.01, 1.0,
                "solver=heavy: share of the weighted block's energy the heavy rows must hold"),
      opt_int("heavy_rows", 16, 1, 65536,
              "solver=heavy: most heavy rows per token (at least rank_cap are used)"),
      opt_int("sweep", 64, 0, 1 << 20,
              "solver=heavy: a light row's projection is renewed at least every this many "
              "tokens (0: only when it turns heavy)"),
  };
  eviction::add_head_budget_options(m.options);
  m.validate = [](const CacheConfig& c) {
    eviction::check_sinks_below_budget(c);
    VQ_CHECK(c.get_int("n_sink") + c.get_int("recent") < c.get_int("budget"), InvalidArgument,
             c.method(), ": n_sink + recent = ", c.get_int("n_sink") + c.get_int("recent"),
             " must be below budget = ", c.get_int("budget"), " so that some token can be evicted");
  };
  m.make_cache = [](const CacheConfig& c, const CacheContext& ctx) -> std::unique_ptr<KVCache> {
    return std::make_unique<CurDKVCache>(c, ctx);
  };
  m.make_scorer = eviction::make_curdkv_scorer;
  return m;
}

}  // namespace vq

// `curdkv`: value-aware eviction by energy-weighted leverage scores (spec: curdkv.txt).
// For each incoming token (prefill and decode alike):
//   1. attention a of the incoming key (or the true queries) over the stored keys;
//   2. weighted values W = a ⊙ V (row i scaled by a_i);
//   3. leverage l_i of each row of W over its top min(rank_cap, n, D) singular directions;
//   4. cumulative score += l; the newcomer is seeded with its own leverage inside the enlarged
//      block it joins (its key attends to itself too);
//   5. over budget, evict the lowest score outside the first n_sink positions.
#include <cmath>
#include <limits>

#include "core/options.hpp"
#include "eviction/eviction_cache.hpp"
#include "eviction/leverage.hpp"
#include "eviction/methods.hpp"
#include "veloxquant/errors.hpp"

namespace vq {
namespace {

class CurDKVCache final : public eviction::EvictionCache {
 public:
  CurDKVCache(const CacheConfig& c, const CacheContext& ctx)
      : EvictionCache(c, ctx, c.get_int("budget"), c.get_int("n_sink")),
        rank_cap_(c.get_int("rank_cap")),
        mean_score_(c.get_string("score") == "mean"),
        use_queries_(c.get_string("query") == "true"),
        reference_(c.get_string("solver") == "reference") {}

 protected:
  void on_token(eviction::HeadState& st, const float* k, const float* v,
                const eviction::QueryRows& q, int64_t pos) override {
    const int64_t D = head_dim();
    if (st.n > 0) {  // steps 1-4: score the tokens already stored
      weighted_leverage(st, st.n, k, q);
      for (int64_t i = 0; i < st.n; ++i) {
        st.score[static_cast<size_t>(i)] += lev_[static_cast<size_t>(i)];
        st.aux[static_cast<size_t>(i)] += 1.0;
      }
    }
    // Seed: the newcomer's leverage inside the block it joins.
    const int64_t slot = append(st, k, v, pos, 0.0, 1.0);
    weighted_leverage(st, st.n, k, q);
    st.score[static_cast<size_t>(slot)] = lev_[static_cast<size_t>(slot)];
    (void)D;
    if (over_budget(st)) {  // step 5: no recent window, sinks only
      const int64_t protect_from = std::numeric_limits<int64_t>::max();
      const int64_t victim =
          mean_score_ ? argmin_evictable(st, protect_from,
                                         [&](int64_t i) {
                                           return st.score[static_cast<size_t>(i)] /
                                                  st.aux[static_cast<size_t>(i)];
                                         })
                      : argmin_score(st, protect_from);
      if (victim >= 0) remove_slot(st, victim);
    }
  }

 private:
  // Leverage of the rows [0, n) of a ⊙ V, a = driving attention of this token over K[0, n).
  void weighted_leverage(const eviction::HeadState& st, int64_t n, const float* k,
                         const eviction::QueryRows& q) {
    const int64_t D = head_dim();
    attn_.resize(static_cast<size_t>(n));
    tmp_.resize(static_cast<size_t>(n));
    lev_.resize(static_cast<size_t>(n));
    if (W_.rows() < n) W_.resize(std::max<int64_t>(n, 2 * W_.rows()), D);
    eviction::driving_attention(st.K, n, k, q, use_queries_, attn_.data(), tmp_.data());
    for (int64_t i = 0; i < n; ++i) {
      const double a = attn_[static_cast<size_t>(i)];
      const float* vr = st.V.row(i).data();
      double* wr = W_.row(i).data();
      for (int64_t d = 0; d < D; ++d) wr[d] = a * static_cast<double>(vr[d]);
    }
    if (reference_)
      eviction::leverage_reference(W_.data(), n, D, rank_cap_, lev_.data());
    else
      eviction::leverage_fast(W_.data(), n, D, rank_cap_, lev_.data());
  }

  int64_t rank_cap_;
  bool mean_score_;
  bool use_queries_;
  bool reference_;
  std::vector<double> attn_, tmp_, lev_;
  eviction::RowMatD W_;  // Eigen-owned (aligned): reductions do not depend on input addresses
};

}  // namespace

MethodInfo curdkv_method_info() {
  MethodInfo m;
  m.id = "curdkv";
  m.family = Family::Eviction;
  m.description =
      "value-aware eviction: cumulative leverage score of the attention-weighted value block";
  m.options = {
      opt_int("budget", 512, 1, kMaxBudget, "most tokens kept per head (sinks included)"),
      opt_int("n_sink", 4, 0, kMaxBudget, "leading positions that are never evicted"),
      opt_int("rank_cap", 16, 1, 65536, "leading singular directions in each leverage estimate"),
      opt_choice("score", "cumulative", {"cumulative", "mean"},
                 "eviction key: summed leverage, or leverage per update received"),
      opt_choice("query", "true", {"true", "proxy"},
                 "attention source: true queries when supplied, or the key-as-query proxy"),
      opt_choice("solver", "fast", {"fast", "reference"},
                 "leverage routine: Gram/closed-form fast path, or the full-SVD oracle"),
  };
  m.validate = [](const CacheConfig& c) { eviction::check_sinks_below_budget(c); };
  m.make_cache = [](const CacheConfig& c, const CacheContext& ctx) -> std::unique_ptr<KVCache> {
    return std::make_unique<CurDKVCache>(c, ctx);
  };
  return m;
}

}  // namespace vq

// `morphkv` (Ghadia et al., "Dialogue Without Limits: Constant-Sized KV Caches for Extended
// Responses in LLMs", ICML 2025): retention is decided by the attention profile of the recent
// window instead of the current token alone. The probes are the last `window` positions (their
// true queries when supplied and query=true, else their keys); each probe attends causally (only
// to kept tokens at or before its own position) over the kept keys, the G query heads of a probe
// are averaged, and the probes are fused by sum or max:
//   score_i = fuse_{w in window} mean_g softmax_{j <= pos_w}(K_j . q_{w,g} / sqrt(D))_i
// Each new token joins first; over budget, the lowest-scoring non-sink token leaves.
// Adaptations: the attention of a past probe is recomputed over the cache as it is now (the paper
// reuses the attention maps of those steps); the recent tokens are not hard-protected, they
// compete with what the window gives them (their own self-attention included). With window = 1
// the single probe is the current token and the rule is exactly tova's.
#include <algorithm>
#include <limits>

#include "core/options.hpp"
#include "eviction/attention_window.hpp"
#include "eviction/methods.hpp"
#include "eviction/one_shot.hpp"

namespace vq {
namespace {

class MorphKVCache final : public eviction::EvictionCache {
 public:
  MorphKVCache(const CacheConfig& c, const CacheContext& ctx)
      : EvictionCache(c, ctx, c.get_int("budget"), c.get_int("n_sink")),
        window_(c.get_int("window")),
        fusion_(c.get_string("fusion") == "max" ? eviction::Fusion::Max : eviction::Fusion::Sum),
        use_queries_(c.get_string("query") == "true") {}

 protected:
  void on_shape_known(int64_t B, int64_t H) override {
    EvictionCache::on_shape_known(B, H);
    rings_.assign(static_cast<size_t>(B * H), eviction::ProbeRing{});
    for (auto& r : rings_) r.reset(window_, head_dim());
  }

  void on_token(eviction::HeadState& st, const float* k, const float* v,
                const eviction::QueryRows& q, int64_t pos) override {
    eviction::ProbeRing& ring = rings_[head_index(st)];
    ring.push(pos, k, q, use_queries_);
    append(st, k, v, pos, 0.0);
    if (!over_budget(st)) return;
    eviction::window_attention(keys(st), st.n, st.kv.positions(), ring, fusion_, scratch_);
    std::copy_n(scratch_.out.begin(), st.n, st.score.begin());
    evict_lowest(st, std::numeric_limits<int64_t>::max());
  }

 private:
  int64_t window_;
  eviction::Fusion fusion_;
  bool use_queries_;
  std::vector<eviction::ProbeRing> rings_;  // one per (b, h)
  eviction::AttnScratch scratch_;
  int64_t policy_bytes() const override {
    int64_t b = scratch_.bytes() + eviction::buffer_bytes(rings_);
    for (const auto& r : rings_) b += r.bytes();
    return b;
  }
};

// One shot (kvpress has no MorphKV press): the decode rule applied once, with the whole context
// held. The probes are the last w = min(window, S) context positions t; each attends causally
// over tokens 0..t (mean over its G query heads, or its key as proxy), and the maps are fused:
//   score_j = fuse_{t in [S - w, S)} mean_g softmax_{l <= t}(k_l . q_{t,g} / sqrt(D))_j
// (a probe puts 0 on the tokens after it). The sinks get +inf; the window's own tokens are not
// protected, they compete with the scores the window gives them, as at decode.
class MorphKVScorer final : public OneShotScorer {
 public:
  explicit MorphKVScorer(const CacheConfig& c)
      : window_(c.get_int("window")),
        n_sink_(c.get_int("n_sink")),
        max_(c.get_string("fusion") == "max"),
        use_queries_(c.get_string("query") == "true") {}

  void score(const OneShotInput& in, double* out) const override {
    const int64_t S = in.S, G = in.probes(use_queries_);
    std::vector<double> a(static_cast<size_t>(S)), m(static_cast<size_t>(S));
    for (int64_t h = 0; h < in.H; ++h) {
      double* o = out + h * S;
      std::fill(o, o + S, 0.0);
      for (int64_t t = std::max<int64_t>(0, S - window_); t < S; ++t) {
        std::fill(m.begin(), m.end(), 0.0);
        for (int64_t g = 0; g < G; ++g) {
          eviction::causal_attention(in.key(h, 0), S, in.D, in.probe(use_queries_, h, g, t), t,
                                     a.data());
          for (int64_t j = 0; j <= t; ++j)
            m[static_cast<size_t>(j)] += a[static_cast<size_t>(j)] / static_cast<double>(G);
        }
        for (int64_t j = 0; j < S; ++j)
          o[j] =
              max_ ? std::max(o[j], m[static_cast<size_t>(j)]) : o[j] + m[static_cast<size_t>(j)];
      }
      for (int64_t s = 0; s < S && in.pos0 + s < n_sink_; ++s)
        o[s] = std::numeric_limits<double>::infinity();
    }
  }

 private:
  int64_t window_, n_sink_;
  bool max_, use_queries_;
};

}  // namespace

MethodInfo morphkv_method_info() {
  MethodInfo m;
  m.id = "morphkv";
  m.family = Family::Eviction;
  m.description = "evict the token the last `window` positions attend to least (fused attention)";
  m.options = {
      eviction::budget_option(),
      eviction::n_sink_option(),
      opt_int("window", 32, 1, 65536,
              "recent positions whose attention decides retention (1 = tova's rule)"),
      opt_choice("fusion", "sum", {"sum", "max"},
                 "how the window's attention maps combine: summed, or the largest per token"),
      opt_choice("query", "true", {"true", "proxy"},
                 "probe vectors: true queries when supplied, or the keys as proxies"),
  };
  eviction::add_head_budget_options(m.options);
  m.validate = [](const CacheConfig& c) { eviction::check_sinks_below_budget(c); };
  m.make_cache = [](const CacheConfig& c, const CacheContext& ctx) -> std::unique_ptr<KVCache> {
    return std::make_unique<MorphKVCache>(c, ctx);
  };
  m.make_scorer = [](const CacheConfig& c) -> std::unique_ptr<OneShotScorer> {
    return std::make_unique<MorphKVScorer>(c);
  };
  return m;
}

}  // namespace vq

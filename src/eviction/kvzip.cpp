// `kvzip` (Kim et al., "KVzip: Query-Agnostic KV Cache Compression with Context
// Reconstruction", 2025): a token matters if reconstructing the context relies on it. KVzip
// feeds the model a prompt that repeats the context and scores every cached token by the largest
// attention any query of that repeat places on it. A cache cannot run the model again, so the
// probe is built from what the cache holds:
//   probe=repeat  the kept keys themselves, replayed as the repeated context (the spec's
//                 "key-based probe"). Every probe row attends to every kept token (the repeat
//                 comes after the whole context, so there is no causal mask):
//                   score_j = max_i softmax_j(K_i . K / sqrt(D))
//                 When an update pushes the cache over budget, the kept rows and the whole
//                 incoming chunk are scored in one round and the lowest T - budget non-sinks
//                 leave (a prompt is compressed in one shot, as in the paper; one token at a
//                 time this is one eviction per step). Cost O(T^2 D) per round, computed in
//                 blocks of 128 probe rows.
//   probe=latest  only the latest token is the probe: its attention over the kept tokens (true
//                 queries when supplied and query=true, else its key). This is exactly tova.
// Ties evict the lower position. `query` only affects probe=latest: the model's queries for a
// re-read of the context are not available to a cache, so the repeat probe is key-based.
// Adaptations: the paper scores with the model's own forward pass over the repeated text and
// compresses once per context; here the probe is a key proxy and the rule runs whenever the
// budget is exceeded.
#include <algorithm>
#include <limits>
#include <vector>

#include "core/options.hpp"
#include "eviction/attention_window.hpp"
#include "eviction/methods.hpp"
#include "eviction/one_shot.hpp"
#include "veloxquant/registry.hpp"

namespace vq {
namespace {

constexpr int64_t kProbeBlock = 128;

class KVzipCache final : public eviction::ChunkScoringCache {
 public:
  KVzipCache(const CacheConfig& c, const CacheContext& ctx)
      : ChunkScoringCache(c, ctx, c.get_int("budget"), c.get_int("n_sink")),
        repeat_(c.get_string("probe") == "repeat"),
        use_queries_(c.get_string("query") == "true") {}

 protected:
  void process_head(eviction::HeadState& st, const float* K, const float* V,
                    const std::vector<eviction::QueryRows>& q, int64_t S, int64_t pos0) override {
    if (!repeat_) {
      EvictionCache::process_head(st, K, V, q, S, pos0);
      return;
    }
    const int64_t D = head_dim();
    if (st.n + S <= budget()) {
      for (int64_t s = 0; s < S; ++s) append(st, K + s * D, V + s * D, pos0 + s, 0.0);
      return;
    }
    const int64_t T = gather(st, K, S, pos0);
    Chunk& c = chunk();
    repeat_scores(T, c);
    eviction::lowest_evictable(c.score.data(), c.all_pos.data(), T, n_sink(), T - budget(), c.order,
                               c.victims);
    mark_victims(T);
    commit(st, K, V, S, pos0, c.score.data());
  }

  // probe=latest: tova's step.
  void on_token(eviction::HeadState& st, const float* k, const float* v,
                const eviction::QueryRows& q, int64_t pos) override {
    append(st, k, v, pos, 0.0);
    if (!over_budget(st)) return;
    eviction::AttnScratch& w = chunk().attn;
    eviction::step_attention(keys(st), st.n, k, q, use_queries_, w);
    std::copy_n(w.out.begin(), st.n, st.score.begin());
    evict_lowest(st, std::numeric_limits<int64_t>::max());
  }

 private:
  // c.score[j] = max over probe rows i of softmax_j(c.all_K[i] . c.all_K / sqrt(D)), j < T.
  void repeat_scores(int64_t T, Chunk& c) {
    const int64_t D = head_dim();
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const int64_t rows = std::min(T, kProbeBlock);
    Probe& p = probe_.local();
    eviction::RowMatF& L = p.L;
    if (L.rows() < rows || L.cols() < T) L.resize(std::max(rows, L.rows()), T);
    if (p.best.size() < T) p.best.resize(T);
    if (p.rowv.size() < rows) p.rowv.resize(rows);
    auto best = p.best.head(T);
    best.setZero();
    if (p.probe.rows() < rows || p.probe.cols() != D) p.probe.resize(rows, D);
    for (int64_t r0 = 0; r0 < T; r0 += kProbeBlock) {
      const int64_t rb = std::min(kProbeBlock, T - r0);
      auto Lb = L.topLeftCorner(rb, T);
      auto rv = p.rowv.head(rb);
      c.all_K->read(r0, rb, p.probe.data());
      eviction::rows_times_keys(*c.all_K, T, p.probe.data(), rb, L.data(), L.cols());
      Lb *= scale;
      rv = Lb.rowwise().maxCoeff();
      Lb.array().colwise() -= rv.array();
      Lb.array() = Lb.array().exp();
      rv = Lb.rowwise().sum();
      Lb.array().colwise() /= rv.array();
      best = best.cwiseMax(Lb.colwise().maxCoeff().transpose());
    }
    c.score.resize(static_cast<size_t>(T));
    for (int64_t j = 0; j < T; ++j) c.score[static_cast<size_t>(j)] = best[j];
  }

  bool repeat_, use_queries_;
  struct Probe {
    eviction::RowMatF L;      // [block, >= T] probe logits, reused
    eviction::RowMatF probe;  // [block, D] the probe rows of one block
    Eigen::VectorXf best, rowv;
  };
  eviction::Scratch<Probe> probe_;
};

// One shot (kvpress's KVzipPress scores a real repeat pass of the model; see docs/methods.md):
//   probe=repeat  the decode rule over the whole context: every context key, replayed as the
//                 repeated context, attends to every context token (no causal mask) and a token
//                 scores the largest weight any probe puts on it:
//                   score_j = max_{i < S} softmax_{l < S}(k_i . k_l / sqrt(D))_j
//                 The sinks get +inf (kvpress gives them 1, the largest possible weight).
//   probe=latest  tova's one-shot scorer, so that "probe=latest is tova" holds in both
//                 protocols (kvpress's TOVAPress: the last query, mean over the layer's heads).
class KVzipScorer final : public OneShotScorer {
 public:
  explicit KVzipScorer(const CacheConfig& c) : n_sink_(c.get_int("n_sink")) {}

  void score(const OneShotInput& in, double* out) const override {
    const int64_t S = in.S;
    std::vector<double> row(static_cast<size_t>(S));
    for (int64_t h = 0; h < in.H; ++h) {
      double* o = out + h * S;
      std::fill(o, o + S, 0.0);
      for (int64_t i = 0; i < S; ++i) {  // up to S - 1: every probe sees every token
        eviction::causal_attention(in.key(h, 0), S, in.D, in.key(h, i), S - 1, row.data());
        for (int64_t l = 0; l < S; ++l) o[l] = std::max(o[l], row[static_cast<size_t>(l)]);
      }
      for (int64_t s = 0; s < S && in.pos0 + s < n_sink_; ++s)
        o[s] = std::numeric_limits<double>::infinity();
    }
  }

 private:
  int64_t n_sink_;
};

std::unique_ptr<OneShotScorer> make_kvzip_scorer(const CacheConfig& c) {
  if (c.get_string("probe") == "repeat") return std::make_unique<KVzipScorer>(c);
  const CacheConfig tova = CacheConfig::parse("tova:query=" + c.get_string("query"));
  return find_method("tova").make_scorer(tova);
}

}  // namespace

MethodInfo kvzip_method_info() {
  MethodInfo m;
  m.id = "kvzip";
  m.family = Family::Eviction;
  m.description =
      "context-reconstruction reliance: evict the token a replay of the context attends to least";
  m.options = {
      eviction::budget_option(),
      eviction::n_sink_option(),
      opt_choice("probe", "repeat", {"repeat", "latest"},
                 "probe: every kept key replayed (max attention), or the latest token (= tova)"),
      opt_choice("query", "true", {"true", "proxy"},
                 "probe=latest attention source: true queries when supplied, or the key proxy"),
  };
  eviction::add_head_budget_options(m.options);
  m.validate = [](const CacheConfig& c) { eviction::check_sinks_below_budget(c); };
  m.make_cache = [](const CacheConfig& c, const CacheContext& ctx) -> std::unique_ptr<KVCache> {
    return std::make_unique<KVzipCache>(c, ctx);
  };
  m.make_scorer = make_kvzip_scorer;
  return m;
}

}  // namespace vq

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
//                 blocks of 128 probe rows: about T/4 decode attention steps over the same cache
//                 (bench speed; the GEMM runs faster per multiply-add than the attention's
//                 matrix-vector products).
//                 rescore=r > 1 (one token per update only) runs the round at every r-th
//                 eviction: in between, the newcomer is held unscored (score +inf) and the
//                 lowest of the last round's scores leaves, so the replay is paid once per r
//                 tokens. A chunk (S > 1, a prompt) is always scored in one round, which counts
//                 as a rescore. rescore=0 (the default) is r = ceil(budget / 4), at most
//                 (budget - n_sink) / 2 (eviction::auto_rescore): about one attention step per
//                 token amortised. rescore=1 is the exact rule (every eviction a full round).
//   probe=latest  only the latest token is the probe: its attention over the kept tokens (true
//                 queries when supplied and query=true, else its key). This is exactly tova.
// Ties evict the lower position. `query` only affects probe=latest: the model's queries for a
// re-read of the context are not available to a cache, so the repeat probe is key-based.
// Adaptations: the paper scores with the model's own forward pass over the repeated text and
// compresses once per context; here the probe is a key proxy and the rule runs while decoding,
// at every rescore-th eviction (by default every ceil(budget / 4)-th).
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
        use_queries_(c.get_string("query") == "true"),
        rescore_(eviction::rescore_interval(c, ctx.head_dim)) {}

 protected:
  void on_shape_known(int64_t B, int64_t H) override {
    ChunkScoringCache::on_shape_known(B, H);
    since_.assign(static_cast<size_t>(B * H), 0);
  }

  void process_head(eviction::HeadState& st, const float* K, const float* V,
                    const std::vector<eviction::QueryRows>& q, int64_t S, int64_t pos0) override {
    if (!repeat_) {
      EvictionCache::process_head(st, K, V, q, S, pos0);
      return;
    }
    const int64_t D = head_dim();
    int64_t& since = since_[head_index(st)];
    // Between rounds a newcomer is held unscored (+inf) until the next round.
    const bool lazy = rescore_ > 1 && since > 0;
    const double fresh = lazy ? std::numeric_limits<double>::infinity() : 0.0;
    if (st.n + S <= budget()) {
      for (int64_t s = 0; s < S; ++s) append(st, K + s * D, V + s * D, pos0 + s, fresh);
      return;
    }
    if (S == 1 && lazy && since < rescore_) {  // between rounds: the lowest of the last scores
      append(st, K, V, pos0, fresh);
      since += 1;
      while (st.n > budget()) {  // as the round below: down to the cache's budget
        const int64_t slot = argmin_score(st, std::numeric_limits<int64_t>::max());
        if (slot < 0) break;
        remove_slot(st, slot);
      }
      return;
    }
    since = 1;
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

  int64_t policy_bytes() const override { return eviction::buffer_bytes(since_); }

  bool repeat_, use_queries_;
  int64_t rescore_;             // rounds every rescore_-th eviction (probe=repeat, S == 1)
  std::vector<int64_t> since_;  // per (b, h): evictions since the last round (0: none yet)
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
      "context-reconstruction reliance: evict the token a replay of the context attends to least "
      "(decode: replayed every ceil(budget / 4)-th eviction by default)";
  m.options = {
      eviction::budget_option(),
      eviction::n_sink_option(),
      opt_choice("probe", "repeat", {"repeat", "latest"},
                 "probe: every kept key replayed (max attention), or the latest token (= tova)"),
      opt_choice("query", "true", {"true", "proxy"},
                 "probe=latest attention source: true queries when supplied, or the key proxy"),
      eviction::rescore_option("probe=repeat decode, one token per update", "ceil(budget / 4)"),
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

// `tova` (Oren et al., "Transformers are Multi-State RNNs", 2024): Token Omission Via Attention.
// Each new token joins the cache first; when the cache is then over budget, the attention of the
// current step over every kept token (the newcomer included) is computed and the token with the
// lowest weight leaves. Scores are not accumulated: only the current step's attention counts.
// Attention: the true queries of the step (mean over the G query heads of the KV head's group)
// when supplied and query=true, else the key-as-query proxy softmax(K k / sqrt(D)).
// Adaptation: the paper averages the weights over all heads of a layer and evicts the same token
// from every head; here each KV head decides alone (heads stay independent, as for h2o).
#include <algorithm>
#include <limits>

#include "core/options.hpp"
#include "eviction/attention_window.hpp"
#include "eviction/methods.hpp"
#include "eviction/one_shot.hpp"

namespace vq {
namespace {

class TovaCache final : public eviction::EvictionCache {
 public:
  TovaCache(const CacheConfig& c, const CacheContext& ctx)
      : EvictionCache(c, ctx, c.get_int("budget"), c.get_int("n_sink")),
        use_queries_(c.get_string("query") == "true") {}

 protected:
  void on_token(eviction::HeadState& st, const float* k, const float* v,
                const eviction::QueryRows& q, int64_t pos) override {
    append(st, k, v, pos, 0.0);
    if (!over_budget(st)) return;  // scores only matter when someone must leave
    eviction::AttnScratch& w = scratch_.local();
    eviction::step_attention(keys(st), st.n, k, q, use_queries_, w);
    std::copy_n(w.out.begin(), st.n, st.score.begin());
    evict_lowest(st, std::numeric_limits<int64_t>::max());
  }

 private:
  bool use_queries_;
  eviction::Scratch<eviction::AttnScratch> scratch_;
};

// One shot (kvpress's TOVAPress): the attention of the last context token over the others,
// averaged over every query head of the layer (all KV heads' groups), the same score for every
// KV head; the last token itself gets the largest of those scores (kept first).
class TovaScorer final : public OneShotScorer {
 public:
  explicit TovaScorer(const CacheConfig& c) : use_queries_(c.get_string("query") == "true") {}
  void score(const OneShotInput& in, double* out) const override {
    const int64_t S = in.S, G = in.probes(use_queries_);
    std::vector<double> mean(static_cast<size_t>(S), 0.0), a(static_cast<size_t>(S));
    for (int64_t h = 0; h < in.H; ++h)
      for (int64_t g = 0; g < G; ++g) {
        eviction::causal_attention(in.key(h, 0), S, in.D, in.probe(use_queries_, h, g, S - 1),
                                   S - 1, a.data());
        for (int64_t j = 0; j < S; ++j) mean[static_cast<size_t>(j)] += a[static_cast<size_t>(j)];
      }
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j + 1 < S; ++j) {
      mean[static_cast<size_t>(j)] /= static_cast<double>(in.H * G);
      mx = std::max(mx, mean[static_cast<size_t>(j)]);
    }
    mean[static_cast<size_t>(S - 1)] = S > 1 ? mx : 1.0;
    for (int64_t h = 0; h < in.H; ++h) std::copy(mean.begin(), mean.end(), out + h * S);
  }

 private:
  bool use_queries_;
};

}  // namespace

MethodInfo tova_method_info() {
  MethodInfo m;
  m.id = "tova";
  m.family = Family::Eviction;
  m.description = "evict the token with the lowest attention weight at the current step";
  m.options = {
      eviction::budget_option(),
      eviction::n_sink_option(),
      opt_choice("query", "true", {"true", "proxy"},
                 "attention source: true queries when supplied, or the key-as-query proxy"),
  };
  eviction::add_head_budget_options(m.options);
  m.validate = [](const CacheConfig& c) { eviction::check_sinks_below_budget(c); };
  m.make_cache = [](const CacheConfig& c, const CacheContext& ctx) -> std::unique_ptr<KVCache> {
    return std::make_unique<TovaCache>(c, ctx);
  };
  m.make_scorer = [](const CacheConfig& c) -> std::unique_ptr<OneShotScorer> {
    return std::make_unique<TovaScorer>(c);
  };
  return m;
}

}  // namespace vq

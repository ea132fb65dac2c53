// `h2o` (Heavy-Hitter Oracle): each kept token accumulates the softmax attention it receives from
// every later token; over budget, the token with the least accumulated mass (outside the sinks
// and the recent window) is evicted. Attention comes from the key-as-query proxy
// softmax(K k / sqrt(D)) or, when the engine supplies them, the true queries.
#include <algorithm>

#include "core/options.hpp"
#include "eviction/eviction_cache.hpp"
#include "eviction/methods.hpp"
#include "eviction/one_shot.hpp"
#include "veloxquant/errors.hpp"

namespace vq {
namespace {

class H2OCache final : public eviction::EvictionCache {
 public:
  H2OCache(const CacheConfig& c, const CacheContext& ctx)
      : EvictionCache(c, ctx, c.get_int("budget"), c.get_int("n_sink")),
        recent_(c.get_int("recent")),
        decay_(c.get_float("decay")),
        use_queries_(c.get_string("query") == "true") {}

 protected:
  void on_token(eviction::HeadState& st, const float* k, const float* v,
                const eviction::QueryRows& q, int64_t pos) override {
    if (st.n == 0) {
      append(st, k, v, pos, 1.0);  // the very first token starts with full mass
    } else {
      Buffers& w = scratch_.local();
      w.attn.resize(static_cast<size_t>(st.n));
      w.tmp.resize(static_cast<size_t>(st.n));
      eviction::driving_attention(keys(st), st.n, k, q, use_queries_, w.attn.data(), w.tmp.data());
      for (int64_t i = 0; i < st.n; ++i) {
        double& s = st.score[static_cast<size_t>(i)];
        s = decay_ * s + w.attn[static_cast<size_t>(i)];
      }
      append(st, k, v, pos, 0.0);  // a newcomer starts accumulating at the next step
    }
    if (over_budget(st)) {
      evict_lowest(st, pos + 1 - recent_);
    }
  }

 private:
  int64_t recent_;
  double decay_;
  bool use_queries_;
  struct Buffers {
    std::vector<double> attn, tmp;
  };
  eviction::Scratch<Buffers> scratch_;
};

// One shot (kvpress's ObservedAttentionPress): the attention token j receives from every context
// query i >= j (causal prefill attention), summed and divided by the S - j queries that could
// see it, averaged over the KV head's query group. No sinks, no recent window.
class H2OScorer final : public OneShotScorer {
 public:
  explicit H2OScorer(const CacheConfig& c) : use_queries_(c.get_string("query") == "true") {}
  void score(const OneShotInput& in, double* out) const override {
    const int64_t S = in.S, G = in.probes(use_queries_);
    std::vector<double> a(static_cast<size_t>(S));
    for (int64_t h = 0; h < in.H; ++h) {
      double* o = out + h * S;
      std::fill(o, o + S, 0.0);
      for (int64_t g = 0; g < G; ++g)
        for (int64_t i = 0; i < S; ++i) {
          eviction::causal_attention(in.key(h, 0), S, in.D, in.probe(use_queries_, h, g, i), i,
                                     a.data());
          for (int64_t j = 0; j <= i; ++j) o[j] += a[static_cast<size_t>(j)];
        }
      for (int64_t j = 0; j < S; ++j) o[j] /= static_cast<double>(G * (S - j));
    }
  }

 private:
  bool use_queries_;
};

}  // namespace

MethodInfo h2o_method_info() {
  MethodInfo m;
  m.id = "h2o";
  m.family = Family::Eviction;
  m.description = "Heavy-Hitter Oracle: evict the token with the least cumulative attention mass";
  m.options = {
      eviction::budget_option(),
      eviction::n_sink_option(),
      opt_int("recent", 0, 0, kMaxBudget, "most recent positions that are never evicted"),
      opt_float("decay", "1", 0.0, 1.0, "multiplier on old scores before each accumulation"),
      opt_choice("query", "true", {"true", "proxy"},
                 "attention source: true queries when supplied, or the key-as-query proxy"),
  };
  eviction::add_head_budget_options(m.options);
  m.validate = [](const CacheConfig& c) {
    eviction::check_sinks_below_budget(c);
    VQ_CHECK(c.get_int("n_sink") + c.get_int("recent") < c.get_int("budget"), InvalidArgument,
             c.method(), ": n_sink + recent = ", c.get_int("n_sink") + c.get_int("recent"),
             " must be below budget = ", c.get_int("budget"), " so that some token can be evicted");
  };
  m.make_cache = [](const CacheConfig& c, const CacheContext& ctx) -> std::unique_ptr<KVCache> {
    return std::make_unique<H2OCache>(c, ctx);
  };
  m.make_scorer = [](const CacheConfig& c) -> std::unique_ptr<OneShotScorer> {
    return std::make_unique<H2OScorer>(c);
  };
  return m;
}

}  // namespace vq

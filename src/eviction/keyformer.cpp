// `keyformer` (Adnan et al., "Keyformer: KV Cache Reduction through Key Tokens Selection for
// Efficient Generative Inference", MLSys 2024): H2O's accumulated attention, but each step's
// attention is a Gumbel-softmax of the logits, which regularises the choice of "key tokens":
//   p_i = softmax_i((x_i + z_i) / tau),   x_i = K_i . q / sqrt(D)
//   score_i += p_i       (mean over the G query heads of the group when true queries are given)
// z_i is Gumbel(0, 1) noise frozen per token: drawn once from (CacheContext.seed, position), so
// the result is deterministic under a seed, differs across seeds, and is the same in every head
// of a layer (a head's result never depends on its index). A newcomer starts at 0 and
// accumulates from the next step (the first token of a head starts at 1, as in h2o). Over
// budget, the lowest score outside the sinks and the `recent` window leaves.
// Adaptations: the paper anneals tau from 1 to 2 over the generation and redraws the noise; here
// tau is the fixed `temperature` option and the noise is frozen per token (the spec's
// "frozen Gumbel noise"), which keeps evictions reproducible and independent of chunking.
#include "eviction/keyformer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/options.hpp"
#include "core/rng.hpp"
#include "eviction/eviction_cache.hpp"
#include "eviction/methods.hpp"
#include "eviction/one_shot.hpp"
#include "veloxquant/errors.hpp"

namespace vq {

double eviction::keyformer_gumbel(uint64_t seed, int64_t pos) {
  Rng rng(layer_seed(seed, pos));
  double u = rng.uniform();
  while (u <= 0.0) u = rng.uniform();
  return -std::log(-std::log(u));
}

namespace {

class KeyformerCache final : public eviction::EvictionCache {
 public:
  KeyformerCache(const CacheConfig& c, const CacheContext& ctx)
      : EvictionCache(c, ctx, c.get_int("budget"), c.get_int("n_sink")),
        recent_(c.get_int("recent")),
        inv_tau_(1.0 / c.get_float("temperature")),
        use_queries_(c.get_string("query") == "true") {}

 protected:
  void on_token(eviction::HeadState& st, const float* k, const float* v,
                const eviction::QueryRows& q, int64_t pos) override {
    const double z = eviction::keyformer_gumbel(context().seed, pos);
    if (st.n == 0) {
      append(st, k, v, pos, 1.0, z);
    } else {
      const size_t n = static_cast<size_t>(st.n);
      Buffers& w = scratch_.local();
      if (w.attn.size() < n) {
        w.attn.resize(n);
        w.tmp.resize(n);
        w.prod.resize(n);
      }
      Eigen::Map<Eigen::VectorXd> a(w.attn.data(), st.n), t(w.tmp.data(), st.n);
      if (use_queries_ && q.G > 0) {
        a.setZero();
        for (int64_t g = 0; g < q.G; ++g) {
          noisy_softmax(st, q.row(g), w.tmp.data(), w.prod.data());
          a += t;
        }
        a /= static_cast<double>(q.G);
      } else {
        noisy_softmax(st, k, w.attn.data(), w.prod.data());
      }
      Eigen::Map<Eigen::VectorXd>(st.score.data(), st.n) += a;
      append(st, k, v, pos, 0.0, z);
    }
    if (over_budget(st)) {
      evict_lowest(st, pos + 1 - recent_);
    }
  }

 private:
  // out[0:n] = softmax((K q / sqrt(D) + z) / tau) over the kept rows; z is st.aux. prod: scratch
  // of n floats.
  void noisy_softmax(const eviction::HeadState& st, const float* q, double* out,
                     float* prod) const {
    const int64_t n = st.n, D = head_dim();
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    (void)D;
    Eigen::Map<const Eigen::VectorXd> z(st.aux.data(), n);
    Eigen::Map<Eigen::VectorXf> p(prod, n);
    Eigen::Map<Eigen::VectorXd> o(out, n);
    eviction::row_dots(keys(st), n, q, prod);
    o = (p.cast<double>() * scale + z) * inv_tau_;
    const double mx = o.maxCoeff();
    o = (o.array() - mx).exp();
    o /= o.sum();
  }

  int64_t recent_;
  double inv_tau_;
  bool use_queries_;
  struct Buffers {
    std::vector<double> attn, tmp;
    std::vector<float> prod;
  };
  eviction::Scratch<Buffers> scratch_;
};

// One shot (kvpress has no Keyformer press): the decode rule's accumulation run over the prefilled
// context. Token j collects, from every context query i >= j (the causal prefill attention, the
// token's own query included), its Gumbel-softmax weight, mean over the KV head's query group:
//   score_j = sum_{i >= j} mean_g softmax_{l <= i}((q_{i,g} . k_l / sqrt(D) + z_l) / tau)_j
// not divided by the S - j queries that saw j (the decode sum is not; h2o's one-shot, after
// kvpress's ObservedAttention, is). z_l is the decode cache's frozen noise for the same seed and
// position, so both protocols perturb a token alike. The sinks and the last `recent` context
// tokens get +inf, as the decode rule never evicts them.
class KeyformerScorer final : public OneShotScorer {
 public:
  explicit KeyformerScorer(const CacheConfig& c)
      : n_sink_(c.get_int("n_sink")),
        recent_(c.get_int("recent")),
        inv_tau_(1.0 / c.get_float("temperature")),
        use_queries_(c.get_string("query") == "true") {}

  void score(const OneShotInput& in, double* out) const override {
    const int64_t S = in.S, D = in.D, G = in.probes(use_queries_);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    std::vector<double> z(static_cast<size_t>(S)), p(static_cast<size_t>(S));
    for (int64_t l = 0; l < S; ++l)
      z[static_cast<size_t>(l)] = eviction::keyformer_gumbel(in.seed, in.pos0 + l);
    for (int64_t h = 0; h < in.H; ++h) {
      double* o = out + h * S;
      std::fill(o, o + S, 0.0);
      for (int64_t g = 0; g < G; ++g)
        for (int64_t i = 0; i < S; ++i) {
          const float* q = in.probe(use_queries_, h, g, i);
          double mx = -std::numeric_limits<double>::infinity();
          for (int64_t l = 0; l <= i; ++l) {
            const float* k = in.key(h, l);
            double d = 0;
            for (int64_t t = 0; t < D; ++t) d += static_cast<double>(k[t]) * q[t];
            double& x = p[static_cast<size_t>(l)];
            x = (d * scale + z[static_cast<size_t>(l)]) * inv_tau_;
            mx = std::max(mx, x);
          }
          double sum = 0;
          for (int64_t l = 0; l <= i; ++l)
            sum += (p[static_cast<size_t>(l)] = std::exp(p[static_cast<size_t>(l)] - mx));
          for (int64_t l = 0; l <= i; ++l)
            o[l] += p[static_cast<size_t>(l)] / (sum * static_cast<double>(G));
        }
      for (int64_t s = 0; s < S; ++s)
        if (in.pos0 + s < n_sink_ || s >= S - recent_)
          o[s] = std::numeric_limits<double>::infinity();
    }
  }

 private:
  int64_t n_sink_, recent_;
  double inv_tau_;
  bool use_queries_;
};

}  // namespace

MethodInfo keyformer_method_info() {
  MethodInfo m;
  m.id = "keyformer";
  m.family = Family::Eviction;
  m.description = "H2O over a Gumbel-softmax of the logits with noise frozen per token (seeded)";
  m.options = {
      eviction::budget_option(),
      eviction::n_sink_option(),
      opt_int("recent", 0, 0, kMaxBudget, "most recent positions that are never evicted"),
      opt_float("temperature", "1", 1e-3, 1e3,
                "Gumbel-softmax temperature tau: larger flattens each step's distribution"),
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
    return std::make_unique<KeyformerCache>(c, ctx);
  };
  m.make_scorer = [](const CacheConfig& c) -> std::unique_ptr<OneShotScorer> {
    return std::make_unique<KeyformerScorer>(c);
  };
  return m;
}

}  // namespace vq

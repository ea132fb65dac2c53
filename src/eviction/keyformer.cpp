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

#include <cmath>

#include "core/options.hpp"
#include "core/rng.hpp"
#include "eviction/eviction_cache.hpp"
#include "eviction/methods.hpp"
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
      if (attn_.size() < n) {
        attn_.resize(n);
        tmp_.resize(n);
        prod_.resize(n);
      }
      Eigen::Map<Eigen::VectorXd> a(attn_.data(), st.n), t(tmp_.data(), st.n);
      if (use_queries_ && q.G > 0) {
        a.setZero();
        for (int64_t g = 0; g < q.G; ++g) {
          noisy_softmax(st, q.row(g), tmp_.data());
          a += t;
        }
        a /= static_cast<double>(q.G);
      } else {
        noisy_softmax(st, k, attn_.data());
      }
      Eigen::Map<Eigen::VectorXd>(st.score.data(), st.n) += a;
      append(st, k, v, pos, 0.0, z);
    }
    if (over_budget(st)) {
      evict_lowest(st, pos + 1 - recent_);
    }
  }

 private:
  // out[0:n] = softmax((K q / sqrt(D) + z) / tau) over the kept rows; z is st.aux.
  void noisy_softmax(const eviction::HeadState& st, const float* q, double* out) {
    const int64_t n = st.n, D = head_dim();
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    (void)D;
    Eigen::Map<const Eigen::VectorXd> z(st.aux.data(), n);
    Eigen::Map<Eigen::VectorXf> p(prod_.data(), n);
    Eigen::Map<Eigen::VectorXd> o(out, n);
    eviction::row_dots(keys(st), n, q, prod_.data());
    o = (p.cast<double>() * scale + z) * inv_tau_;
    const double mx = o.maxCoeff();
    o = (o.array() - mx).exp();
    o /= o.sum();
  }

  int64_t recent_;
  double inv_tau_;
  bool use_queries_;
  std::vector<double> attn_, tmp_;
  std::vector<float> prod_;
  int64_t policy_bytes() const override {
    return eviction::buffer_bytes(attn_) + eviction::buffer_bytes(tmp_) +
           eviction::buffer_bytes(prod_);
  }
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
  return m;
}

}  // namespace vq

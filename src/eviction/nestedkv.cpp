// `nestedkv` (NestedKV-adapted, spec curdkv.txt, last lines): three key-only signals at three
// time scales, blended per head, with a surprise gate that routes toward the current step.
// Per (b, h) head, for each new key k at step t (t = 0 for the head's first token), before the
// key joins the cache:
//   surprise   d2 = ||k - e||^2 (e = episodic mean before this key), sigma2 = the mean of the
//              previous d2 values (d2 itself at t = 1), gate g = d2 / (d2 + sigma2)
//              (g = 0 at t = 0 and when both are 0; g = 1/2 for a typically surprising key)
//   stable     s <- s + (k - s) / (t + 1)        long-term mean of every key seen (s = k at t = 0)
//   episodic   e <- (1 - beta) e + beta k        recent mean, beta = episodic_rate (e = k at t = 0)
// The key joins; when the cache is then over budget, every kept token j gets
//   p_x = softmax_j(K_j . x / sqrt(D))            for x in {s, e, k}
//   score_j = (1 - g) * (rho * p_s + (1 - rho) * p_e)_j + g * p_k_j
// and the lowest score outside the sinks leaves. rho is the head-adaptive blend: measured once,
// at the head's first overflow (prefill time: the end of the prompt when fed token by token, or
// inside a long prompt), as rho = max(0, cos(s, e)) and frozen. A head whose recent keys agree
// with its long-term mean (a stationary head) trusts the stable memory; a drifting head trusts
// the episodic one. A surprising key (far from the recent mean) routes the decision toward what
// it attends to itself. Scores are not accumulated. Only keys are used: values never matter.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/options.hpp"
#include "eviction/attention_window.hpp"
#include "eviction/eviction_cache.hpp"
#include "eviction/methods.hpp"
#include "eviction/one_shot.hpp"

namespace vq {
namespace {

struct NestState {
  Eigen::VectorXd stable, episodic;
  double sigma2 = 0, rho = 1;
  int64_t steps = 0;
  bool rho_fixed = false;
  // K . s and K . e per kept slot, carried from step to step (both recurrences are linear in k,
  // so K . s' = (1 - c) K . s + c K . k, the last term being the current key's own logits);
  // valid only while the head stays over budget, rebuilt by two passes otherwise
  std::vector<double> ks, ke;
  bool logits_valid = false;
  int64_t generation = -1;
};

class NestedKVCache final : public eviction::EvictionCache {
 public:
  NestedKVCache(const CacheConfig& c, const CacheContext& ctx)
      : EvictionCache(c, ctx, c.get_int("budget"), c.get_int("n_sink")),
        beta_(c.get_float("episodic_rate")) {}

 protected:
  void on_shape_known(int64_t B, int64_t H) override {
    EvictionCache::on_shape_known(B, H);
    const int64_t D = head_dim();
    states_.assign(static_cast<size_t>(B * H), NestState{});
    for (auto& s : states_) {
      s.stable = Eigen::VectorXd::Zero(D);
      s.episodic = Eigen::VectorXd::Zero(D);
    }
  }

  void on_token(eviction::HeadState& st, const float* k, const float* v, const eviction::QueryRows&,
                int64_t pos) override {
    NestState& ns = states_[head_index(st)];
    const Eigen::Map<const Eigen::VectorXf> kf(k, head_dim());
    double gate = 0;
    double keep_s = 0, keep_e = 0;  // the old means' weights in the new ones
    if (ns.steps == 0) {
      ns.stable = kf.cast<double>();
      ns.episodic = ns.stable;
    } else {
      keep_s = 1.0 - 1.0 / static_cast<double>(ns.steps + 1);
      keep_e = 1.0 - beta_;
      const double d2 = (kf.cast<double>() - ns.episodic).squaredNorm();
      const double typical = ns.steps == 1 ? d2 : ns.sigma2;
      gate = d2 + typical > 0 ? d2 / (d2 + typical) : 0.0;
      ns.sigma2 += (d2 - ns.sigma2) / static_cast<double>(ns.steps);
      ns.stable += (kf.cast<double>() - ns.stable) / static_cast<double>(ns.steps + 1);
      ns.episodic = (1.0 - beta_) * ns.episodic + beta_ * kf.cast<double>();
    }
    ++ns.steps;
    append(st, k, v, pos, 0.0);
    if (!over_budget(st)) {
      ns.logits_valid = false;
      return;
    }
    if (!ns.rho_fixed) {
      const double norms = ns.stable.norm() * ns.episodic.norm();
      ns.rho = norms > 0 ? std::max(0.0, ns.stable.dot(ns.episodic) / norms) : 1.0;
      ns.rho_fixed = true;
    }
    signal_logits(st, ns, k, keep_s, keep_e);
    score(st, ns, gate);
    evict_lowest(st, std::numeric_limits<int64_t>::max(), [&](int64_t victim, int64_t last) {
      ns.ks[static_cast<size_t>(victim)] = ns.ks[static_cast<size_t>(last)];
      ns.ke[static_cast<size_t>(victim)] = ns.ke[static_cast<size_t>(last)];
    });
  }

 private:
  // lt rows 0..2 = K . s, K . e, K . k over the n kept slots (s, e: the means after this key).
  // K . k is one pass of the store's dot kernel; K . s and K . e follow from the last step's by
  // the recurrences (the newest slot gets its two dots directly), or two more passes when the
  // carried values are not current.
  void signal_logits(const eviction::HeadState& st, NestState& ns, const float* k, double keep_s,
                     double keep_e) {
    const int64_t n = st.n, D = head_dim();
    Buffers& w = scratch_.local();
    w.lt.resize(3, n);
    float* ls = w.lt.data();
    float* le = w.lt.data() + n;
    float* lk = w.lt.data() + 2 * n;
    eviction::row_dots(keys(st), n, k, lk);
    std::vector<float>& sig = w.sig;
    sig.resize(2 * D);
    for (int64_t d = 0; d < D; ++d) {
      sig[static_cast<size_t>(d)] = static_cast<float>(ns.stable(d));
      sig[static_cast<size_t>(D + d)] = static_cast<float>(ns.episodic(d));
    }
    ns.ks.resize(static_cast<size_t>(n));
    ns.ke.resize(static_cast<size_t>(n));
    if (!ns.logits_valid || ns.generation != st.kv.generation()) {
      eviction::row_dots(keys(st), n, sig.data(), ls);
      eviction::row_dots(keys(st), n, sig.data() + D, le);
      for (int64_t i = 0; i < n; ++i) {
        ns.ks[static_cast<size_t>(i)] = ls[i];
        ns.ke[static_cast<size_t>(i)] = le[i];
      }
      ns.logits_valid = true;
      ns.generation = st.kv.generation();
      return;
    }
    const double add_s = 1.0 - keep_s, add_e = 1.0 - keep_e;
    for (int64_t i = 0; i + 1 < n; ++i) {
      const double x = static_cast<double>(lk[i]);
      double& a = ns.ks[static_cast<size_t>(i)];
      double& b = ns.ke[static_cast<size_t>(i)];
      a = keep_s * a + add_s * x;
      b = keep_e * b + add_e * x;
      ls[i] = static_cast<float>(a);
      le[i] = static_cast<float>(b);
    }
    const int64_t slot = n - 1;  // the newcomer
    ls[slot] = eviction::row_dot(keys(st), slot, sig.data());
    le[slot] = eviction::row_dot(keys(st), slot, sig.data() + D);
    ns.ks[static_cast<size_t>(slot)] = ls[slot];
    ns.ke[static_cast<size_t>(slot)] = le[slot];
  }

  // st.score[0:n] = the gated blend of the three softmax signals of lt (header comment).
  void score(eviction::HeadState& st, const NestState& ns, double gate) {
    const int64_t n = st.n;
    Buffers& w = scratch_.local();
    if (w.probs.rows() < n) w.probs.resize(std::max<int64_t>(n, 2 * w.probs.rows()), 3);
    auto P = w.probs.topRows(n);
    // Each signal's softmax in float (the exponentials dominate once K is read; float's are
    // twice as wide as double's), its normaliser summed in double.
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim()));
    for (int x = 0; x < 3; ++x) {
      float* l = w.lt.data() + x * n;  // row x of lt: the n logits of signal x, contiguous
      Eigen::Map<Eigen::VectorXf> lx(l, n);
      lx *= scale;
      eviction::exp_shifted_f(l, n, lx.maxCoeff());
      auto p = P.col(x);
      p = lx.cast<double>();
      p /= eviction::sum_fixed(l, n);
    }
    const double rho = ns.rho;
    Eigen::Map<Eigen::VectorXd>(st.score.data(), n) =
        (1.0 - gate) * (rho * P.col(0) + (1.0 - rho) * P.col(1)) + gate * P.col(2);
  }

  double beta_;
  std::vector<NestState> states_;  // one per (b, h)
  struct Buffers {
    Eigen::Matrix<double, Eigen::Dynamic, 3> probs;  // [>= n, 3], reused
    eviction::RowMatF lt;                            // [3, n] logits of s, e and k
    std::vector<float> sig;                          // [2 D] s and e in float
  };
  eviction::Scratch<Buffers> scratch_;
  int64_t policy_bytes() const override {
    int64_t b = eviction::buffer_bytes(states_);
    for (const auto& s : states_)
      b += eviction::buffer_bytes(s.stable) + eviction::buffer_bytes(s.episodic) +
           eviction::buffer_bytes(s.ks) + eviction::buffer_bytes(s.ke);
    return b;
  }
};

// One shot (no kvpress press; spec curdkv.txt names none): the decode rule at the moment the
// context ends, with the whole context held. Per head the recurrences run over the S context keys
// in order (stable mean s, episodic mean e, the last key's surprise gate g against the e and
// sigma2 before it); rho = max(0, cos(s, e)) is measured there, which is where the decode rule
// measures it when the prompt's end is the first overflow. Then, over every context token,
//   score_j = (1 - g) * (rho * p_s + (1 - rho) * p_e)_j + g * p_k_j,   k = the last context key
// (p_x = softmax_j(k_j . x / sqrt(D))); the sinks get +inf. Values and queries are not used.
class NestedKVScorer final : public OneShotScorer {
 public:
  explicit NestedKVScorer(const CacheConfig& c)
      : beta_(c.get_float("episodic_rate")), n_sink_(c.get_int("n_sink")) {}

  void score(const OneShotInput& in, double* out) const override {
    const int64_t S = in.S, D = in.D;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    std::vector<double> p(static_cast<size_t>(3 * S));
    for (int64_t h = 0; h < in.H; ++h) {
      double* o = out + h * S;
      if (S == 0) continue;
      auto key = [&](int64_t s) -> Eigen::VectorXd {
        return Eigen::Map<const Eigen::VectorXf>(in.key(h, s), D).cast<double>();
      };
      Eigen::VectorXd st = key(0), ep = st;
      double sigma2 = 0, gate = 0;
      for (int64_t t = 1; t < S; ++t) {
        const Eigen::VectorXd k = key(t);
        const double d2 = (k - ep).squaredNorm();
        const double typical = t == 1 ? d2 : sigma2;
        gate = d2 + typical > 0 ? d2 / (d2 + typical) : 0.0;
        sigma2 += (d2 - sigma2) / static_cast<double>(t);
        st += (k - st) / static_cast<double>(t + 1);
        ep = (1.0 - beta_) * ep + beta_ * k;
      }
      const double norms = st.norm() * ep.norm();
      const double rho = norms > 0 ? std::max(0.0, st.dot(ep) / norms) : 1.0;
      const Eigen::VectorXd last = key(S - 1);
      const Eigen::VectorXd* probe[3] = {&st, &ep, &last};
      for (int x = 0; x < 3; ++x) {
        double* px = p.data() + x * S;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < S; ++j) {
          px[j] = Eigen::Map<const Eigen::VectorXf>(in.key(h, j), D).cast<double>().dot(*probe[x]) *
                  scale;
          mx = std::max(mx, px[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < S; ++j) sum += (px[j] = std::exp(px[j] - mx));
        for (int64_t j = 0; j < S; ++j) px[j] /= sum;
      }
      for (int64_t j = 0; j < S; ++j)
        o[j] = in.pos0 + j < n_sink_
                   ? std::numeric_limits<double>::infinity()
                   : (1.0 - gate) * (rho * p[static_cast<size_t>(j)] +
                                     (1.0 - rho) * p[static_cast<size_t>(S + j)]) +
                         gate * p[static_cast<size_t>(2 * S + j)];
    }
  }

 private:
  double beta_;
  int64_t n_sink_;
};

}  // namespace

MethodInfo nestedkv_method_info() {
  MethodInfo m;
  m.id = "nestedkv";
  m.family = Family::Eviction;
  m.description =
      "key-only blend of stable, episodic and current signals per head with a surprise gate";
  m.options = {
      eviction::budget_option(),
      eviction::n_sink_option(),
      opt_float("episodic_rate", "0.1", 1e-6, 1.0,
                "beta: weight of each new key in the episodic (recent) mean; memory ~ 1/beta keys"),
  };
  eviction::add_head_budget_options(m.options);
  m.validate = [](const CacheConfig& c) { eviction::check_sinks_below_budget(c); };
  m.make_cache = [](const CacheConfig& c, const CacheContext& ctx) -> std::unique_ptr<KVCache> {
    return std::make_unique<NestedKVCache>(c, ctx);
  };
  m.make_scorer = [](const CacheConfig& c) -> std::unique_ptr<OneShotScorer> {
    return std::make_unique<NestedKVScorer>(c);
  };
  return m;
}

}  // namespace vq

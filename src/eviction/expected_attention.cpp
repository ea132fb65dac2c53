// `expected_attention` (kvpress's ExpectedAttentionPress, Devoto et al. 2025): score each key by
// the attention that *future* queries are expected to give it, from the statistics of the
// queries seen so far. Per query head:
//   mu, C   mean and covariance (divided by n) of the queries before RoPE, positions >= n_sink
//           (the engine hands post-RoPE queries; they are rotated back by their position)
//   R       the RoPE rotation (adjacent pairs, theta 10000) averaged over the next `future`
//           positions after the last one seen; mu' = R mu, C' = R C R^T
//   z_j     = mu' . k_j / sqrt(D) + k_j^T C' k_j / (2 D)   for every token j >= n_sink
//   a       = softmax_j(z), averaged over the KV head's query group
//   score_j = a_j * ||v_j||  (vnorm=true; vnorm=false: a_j)
// The first n_sink tokens get the largest score (kept first). Without queries the keys (rotated
// back) stand in for them.
// One shot (the prefill protocol): the context's queries give the statistics, every context
// token is scored once. Decode: the statistics accumulate over every query seen; when the cache
// is over budget the held tokens are scored with them and the lowest non-sink leaves (kvpress
// compresses the prefill only). A rescore costs O(n D^2) (the quadratic form of every held key),
// about D/2 attention steps over the same cache in multiply-adds, D in practice (double GEMM;
// bench speed). rescore=r > 1 rescores the held tokens every r-th eviction only: in between,
// tokens that arrived since the last rescore are kept (score +inf) and the lowest of the last
// scores leaves, so the rescoring is paid once per r tokens. rescore=0 (the default) is r =
// head_dim, at most (budget - n_sink) / 2 (eviction::auto_rescore): about one attention step per
// token amortised. rescore=1 is the exact rule (every eviction rescored).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/options.hpp"
#include "eviction/eviction_cache.hpp"
#include "eviction/methods.hpp"
#include "eviction/one_shot.hpp"
#include "veloxquant/errors.hpp"

namespace vq {
namespace {

using eviction::RowMatD;

double inv_freq(int64_t i, int64_t D) {
  return std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(D));
}

// The RoPE rotation at one position: cos and sin of p * inv_freq(i, D) per pair i < D / 2. The
// frequencies are computed once per head_dim (a pow per pair per token was a sizeable share of
// a decode step's cost); the angles once per token for its whole query group.
struct RopeAngles {
  int64_t D = -1;
  std::vector<double> freq, c, s;
  void init(int64_t d) {
    D = d;
    freq.resize(static_cast<size_t>(D / 2));
    for (int64_t i = 0; i < D / 2; ++i) freq[static_cast<size_t>(i)] = inv_freq(i, D);
    c.resize(freq.size());
    s.resize(freq.size());
  }
  void at(int64_t p) {
    for (size_t i = 0; i < freq.size(); ++i) {
      const double a = static_cast<double>(p) * freq[i];
      c[i] = std::cos(a);
      s[i] = std::sin(a);
    }
  }
};

// x (post-RoPE at the position `r` was set to) rotated back to pre-RoPE, into out (double).
void unrope(const float* x, int64_t D, const RopeAngles& r, double* out) {
  for (int64_t i = 0; i < D / 2; ++i) {
    const double c = r.c[static_cast<size_t>(i)], s = r.s[static_cast<size_t>(i)];
    const double x0 = x[2 * i], x1 = x[2 * i + 1];
    out[2 * i] = c * x0 + s * x1;
    out[2 * i + 1] = -s * x0 + c * x1;
  }
  if (D % 2) out[D - 1] = x[D - 1];
}

// Query statistics of one query head: running sums over the queries counted.
struct QueryStats {
  Eigen::VectorXd sum;
  Eigen::MatrixXd outer;
  int64_t n = 0;
  void reset(int64_t D) {
    sum = Eigen::VectorXd::Zero(D);
    outer = Eigen::MatrixXd::Zero(D, D);
    n = 0;
  }
  void add(const double* q, int64_t D) {
    const Eigen::Map<const Eigen::VectorXd> v(q, D);
    sum += v;
    outer.selfadjointView<Eigen::Lower>().rankUpdate(v);
    n += 1;
  }
};

struct EAParams {
  int64_t n_sink, future;
  bool covariance, vnorm;
  explicit EAParams(const CacheConfig& c)
      : n_sink(c.get_int("n_sink")),
        future(c.get_int("future")),
        covariance(c.get_bool("covariance")),
        vnorm(c.get_bool("vnorm")) {}
};

// ea_scores' working memory. The cache keeps one per thread (Scratch): a step at n held tokens
// needs two n x D double matrices, and allocating them per eviction on a pool thread costs fresh
// pages (glibc serves blocks that large from mmap outside the main arena) every time.
struct EAWork {
  std::vector<double> cbar, sbar;
  std::vector<int64_t> live;
  RowMatD Km, KC;
  Eigen::MatrixXd R, C, Cr;
  Eigen::VectorXd acc, z, e, mu;
};

// Scores n tokens of one KV head (keys post-RoPE k(i), values v(i), positions pos(i)) with the
// statistics of its G query heads; `next` is the first future position. Adds a_j (group mean)
// * ||v_j|| into out[j] for non-sinks; sinks get +inf here (the caller may lift them to the
// layer maximum).
template <typename KF, typename VF, typename PF>
void ea_scores(const EAParams& p, const std::vector<QueryStats>& stats, int64_t D, int64_t n,
               int64_t next, KF k, VF v, PF pos, double* out, EAWork& w) {
  // Average rotation over the future positions: per pair, mean cos and mean sin.
  std::vector<double>& cbar = w.cbar;
  std::vector<double>& sbar = w.sbar;
  cbar.resize(static_cast<size_t>(D / 2));
  sbar.resize(static_cast<size_t>(D / 2));
  // The angles (next + f) w, f < F, are an arithmetic progression, whose cosines and sines sum
  // in closed form: sum = sin(F w / 2) / sin(w / 2) * {cos, sin}(next w + (F - 1) w / 2)
  // (one pair of sin/cos per pair instead of F; w < 2 pi here, so sin(w / 2) > 0).
  const double F = static_cast<double>(p.future);
  for (int64_t i = 0; i < D / 2; ++i) {
    const double w = inv_freq(i, D);
    const double ratio = p.future == 1 ? 1.0 : std::sin(F * w / 2) / std::sin(w / 2);
    const double mid = static_cast<double>(next) * w + (F - 1) * w / 2;
    cbar[static_cast<size_t>(i)] = ratio * std::cos(mid) / F;
    sbar[static_cast<size_t>(i)] = ratio * std::sin(mid) / F;
  }
  Eigen::MatrixXd& R = w.R;
  R.setIdentity(D, D);
  for (int64_t i = 0; i < D / 2; ++i) {
    R(2 * i, 2 * i) = cbar[static_cast<size_t>(i)];
    R(2 * i, 2 * i + 1) = -sbar[static_cast<size_t>(i)];
    R(2 * i + 1, 2 * i) = sbar[static_cast<size_t>(i)];
    R(2 * i + 1, 2 * i + 1) = cbar[static_cast<size_t>(i)];
  }
  std::vector<int64_t>& live = w.live;
  live.clear();
  for (int64_t j = 0; j < n; ++j)
    if (pos(j) >= p.n_sink) live.push_back(j);
  const auto m = static_cast<int64_t>(live.size());
  RowMatD& Km = w.Km;
  Km.resize(m, D);
  for (int64_t r = 0; r < m; ++r)
    Km.row(r) =
        Eigen::Map<const Eigen::RowVectorXf>(k(live[static_cast<size_t>(r)]), D).cast<double>();
  Eigen::VectorXd& acc = w.acc;
  acc.setZero(m);
  const double sq = std::sqrt(static_cast<double>(D));
  int64_t groups = 0;
  for (const QueryStats& st : stats) {
    if (st.n == 0 || m == 0) continue;
    w.mu = st.sum / static_cast<double>(st.n);
    const Eigen::VectorXd& mu = w.mu;
    Eigen::VectorXd& z = w.z;
    z.noalias() = Km * (R * mu);
    z /= sq;
    if (p.covariance) {
      Eigen::MatrixXd& C = w.C;
      C = st.outer.selfadjointView<Eigen::Lower>();
      C = C / static_cast<double>(st.n) - mu * mu.transpose();
      w.Cr.noalias() = R * C * R.transpose();
      w.KC.noalias() = Km * w.Cr;
      z += w.KC.cwiseProduct(Km).rowwise().sum() / (2.0 * static_cast<double>(D));
    }
    const double mx = z.maxCoeff();
    Eigen::VectorXd& e = w.e;
    e = (z.array() - mx).exp();
    acc += e / e.sum();
    groups += 1;
  }
  if (groups > 0) acc /= static_cast<double>(groups);
  for (int64_t j = 0; j < n; ++j) out[j] = std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < m; ++r) {
    const int64_t j = live[static_cast<size_t>(r)];
    double s = acc(r);
    if (p.vnorm)
      s *= std::sqrt(Eigen::Map<const Eigen::VectorXf>(v(j), D).cast<double>().squaredNorm());
    out[j] = s;
  }
}

class EAScorer final : public OneShotScorer {
 public:
  explicit EAScorer(const CacheConfig& c) : p_(c) {}
  void score(const OneShotInput& in, double* out) const override {
    const int64_t S = in.S, D = in.D, G = in.probes(true);
    VQ_CHECK(S > p_.n_sink, InvalidArgument,
             "expected_attention one-shot: the context holds S = ", S,
             " tokens; it must be longer than n_sink = ", p_.n_sink);
    std::vector<double> q(static_cast<size_t>(D));
    RopeAngles rope;
    rope.init(D);
    EAWork work;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t h = 0; h < in.H; ++h) {
      std::vector<QueryStats> stats(static_cast<size_t>(G));
      for (int64_t g = 0; g < G; ++g) {
        stats[static_cast<size_t>(g)].reset(D);
        for (int64_t s = 0; s < S; ++s) {
          if (in.pos0 + s < p_.n_sink) continue;
          rope.at(in.pos0 + s);
          unrope(in.probe(true, h, g, s), D, rope, q.data());
          stats[static_cast<size_t>(g)].add(q.data(), D);
        }
      }
      double* o = out + h * S;
      ea_scores(
          p_, stats, D, S, in.pos0 + S, [&](int64_t j) { return in.key(h, j); },
          [&](int64_t j) { return in.value(h, j); }, [&](int64_t j) { return in.pos0 + j; }, o,
          work);
      for (int64_t j = 0; j < S; ++j)
        if (!std::isinf(o[j])) mx = std::max(mx, o[j]);
    }
    // Sinks: the layer's largest score, as kvpress pads them.
    for (int64_t i = 0; i < in.H * S; ++i)
      if (std::isinf(out[i])) out[i] = std::isinf(mx) ? 1.0 : mx;
  }

 private:
  EAParams p_;
};

class EACache final : public eviction::EvictionCache {
 public:
  EACache(const CacheConfig& c, const CacheContext& ctx)
      : EvictionCache(c, ctx, c.get_int("budget"), c.get_int("n_sink")),
        p_(c),
        rescore_(eviction::rescore_interval(c, ctx.head_dim)) {}

 protected:
  void on_shape_known(int64_t B, int64_t H) override {
    EvictionCache::on_shape_known(B, H);
    stats_.assign(static_cast<size_t>(B * H), {});
    since_.assign(static_cast<size_t>(B * H), 0);
  }

  void on_token(eviction::HeadState& st, const float* k, const float* v,
                const eviction::QueryRows& q, int64_t pos) override {
    const int64_t D = head_dim();
    auto& hs = stats_[head_index(st)];
    const int64_t G = q.G > 0 ? q.G : 1;
    if (hs.size() != static_cast<size_t>(G)) {
      hs.assign(static_cast<size_t>(G), {});
      for (auto& s : hs) s.reset(D);
    }
    Buffers& w = scratch_.local();
    if (pos >= p_.n_sink) {
      w.qbuf.resize(static_cast<size_t>(D));
      if (w.rope.D != D) w.rope.init(D);
      w.rope.at(pos);
      for (int64_t g = 0; g < G; ++g) {
        unrope(q.G > 0 ? q.row(g) : k, D, w.rope, w.qbuf.data());
        hs[static_cast<size_t>(g)].add(w.qbuf.data(), D);
      }
    }
    int64_t& since = since_[head_index(st)];
    // Between rescores a newcomer is held unscored (+inf) until the next rescore.
    const bool lazy = rescore_ > 1 && since > 0;
    append(st, k, v, pos, lazy ? std::numeric_limits<double>::infinity() : 0.0);
    if (!over_budget(st)) return;
    if (lazy && since < rescore_) {  // between rescores: the lowest of the last scores leaves
      since += 1;
      evict_lowest(st, std::numeric_limits<int64_t>::max());
      return;
    }
    since = 1;
    const int64_t n = st.n;
    w.kbuf.resize(static_cast<size_t>(n * D));
    w.vbuf.resize(static_cast<size_t>(n * D));
    keys(st).read(0, n, w.kbuf.data());
    values(st).read(0, n, w.vbuf.data());
    w.sc.resize(static_cast<size_t>(n));
    ea_scores(
        p_, hs, D, n, pos + 1, [&](int64_t j) { return w.kbuf.data() + j * D; },
        [&](int64_t j) { return w.vbuf.data() + j * D; },
        [&](int64_t j) { return st.kv.position(j); }, w.sc.data(), w.ea);
    std::copy(w.sc.begin(), w.sc.end(), st.score.begin());
    evict_lowest(st, std::numeric_limits<int64_t>::max());
  }

 private:
  EAParams p_;
  int64_t rescore_;
  std::vector<int64_t> since_;  // per (b, h): evictions since the last rescore (0: never scored)
  std::vector<std::vector<QueryStats>> stats_;  // per (b, h): one per query head of the group
  struct Buffers {
    std::vector<double> qbuf, sc;
    std::vector<float> kbuf, vbuf;
    RopeAngles rope;
    EAWork ea;
  };
  eviction::Scratch<Buffers> scratch_;
  int64_t policy_bytes() const override {
    int64_t b = eviction::buffer_bytes(stats_) + eviction::buffer_bytes(since_);
    for (const auto& hs : stats_)
      for (const auto& s : hs) b += eviction::buffer_bytes(s.sum) + eviction::buffer_bytes(s.outer);
    return b;
  }
};

}  // namespace

MethodInfo expected_attention_method_info() {
  MethodInfo m;
  m.id = "expected_attention";
  m.family = Family::Eviction;
  m.description =
      "keep the tokens future queries are expected to attend, from the queries' mean and "
      "covariance rotated to the next positions, times the value norm (decode: rescored every "
      "head_dim-th eviction by default)";
  m.options = {
      eviction::budget_option(),
      eviction::n_sink_option(),
      opt_int("future", 512, 1, 1 << 20, "future positions the RoPE rotation is averaged over"),
      opt_bool("covariance", true, "include the queries' covariance term"),
      opt_bool("vnorm", true, "multiply the expected attention by ||v||"),
      eviction::rescore_option("decode, one token per update", "head_dim"),
  };
  eviction::add_head_budget_options(m.options);
  m.validate = [](const CacheConfig& c) { eviction::check_sinks_below_budget(c); };
  m.make_cache = [](const CacheConfig& c, const CacheContext& ctx) -> std::unique_ptr<KVCache> {
    return std::make_unique<EACache>(c, ctx);
  };
  m.make_scorer = [](const CacheConfig& c) -> std::unique_ptr<OneShotScorer> {
    return std::make_unique<EAScorer>(c);
  };
  return m;
}

}  // namespace vq

// `curdkv_paper`: CurDKV as its paper (Sengupta et al., arXiv:2509.15038) and kvpress's CURPress
// compute it, beside the seed's per-token adaptation `curdkv`. For the tokens of one KV head,
// in position order:
//   k2_i = ||k_i||^2, v2_i = ||v_i||^2        (with projection=gaussian: of k G and v G, where
//                                              G [D, rank] has N(0, 1/rank) entries drawn from
//                                              `seed`, the same G for every layer and head)
//   k2, v2 each divided by their sum over the local window of `window` consecutive tokens that
//   holds i (windows start at token 0; a window of zeros stays zero)
//   score = k2 (leverage=key), v2 (value), (k2 + v2) / 2 (kv_avg) or k2 * v2 (kv_product),
//   divided by its sum over all tokens; the first n_sink positions get 1 (kept first).
// One shot (the prefill protocol): the context is scored once and the best tokens kept.
// Decode: every token is appended; over budget the held tokens (in position order) are scored
// again by the same formula and the lowest one outside the sinks leaves. kvpress has no decode
// rule for CURPress; this one re-scores the held set at each eviction from per-slot energies
// (O(D) for the newcomer plus O(budget) per token).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/options.hpp"
#include "core/rng.hpp"
#include "eviction/eviction_cache.hpp"
#include "eviction/methods.hpp"
#include "eviction/one_shot.hpp"
#include "veloxquant/errors.hpp"

namespace vq {
namespace {

enum class Leverage : int { Key, Value, KvAvg, KvProduct };

struct CurParams {
  Leverage leverage = Leverage::KvProduct;
  int64_t window = 16;
  int64_t n_sink = 4;
  int64_t rank = 0;  // 0: no projection
  eviction::RowMatD G;
  CurParams(const CacheConfig& c, int64_t D) {
    const std::string& l = c.get_string("leverage");
    leverage = l == "key"      ? Leverage::Key
               : l == "value"  ? Leverage::Value
               : l == "kv_avg" ? Leverage::KvAvg
                               : Leverage::KvProduct;
    window = c.get_int("window");
    n_sink = c.get_int("n_sink");
    if (c.get_string("projection") == "gaussian") {
      rank = c.get_int("rank");
      G.resize(D, rank);
      Rng rng(static_cast<uint64_t>(c.get_int("seed")));
      const double sd = 1.0 / std::sqrt(static_cast<double>(rank));
      for (int64_t i = 0; i < D; ++i)
        for (int64_t j = 0; j < rank; ++j) G(i, j) = sd * rng.normal();
    }
  }
  // Squared norm of a row, after the projection when there is one.
  double energy(const float* x, int64_t D) const {
    const Eigen::Map<const Eigen::RowVectorXf> r(x, D);
    if (rank == 0) return r.cast<double>().squaredNorm();
    return (r.cast<double>() * G).squaredNorm();
  }
};

// Divides x[0, n) by its sums over consecutive windows of w (a zero sum leaves zeros).
void local_normalise(std::vector<double>& x, int64_t n, int64_t w) {
  for (int64_t b = 0; b < n; b += w) {
    const int64_t e = std::min(n, b + w);
    double s = 0;
    for (int64_t i = b; i < e; ++i) s += x[static_cast<size_t>(i)];
    if (s > 0)
      for (int64_t i = b; i < e; ++i) x[static_cast<size_t>(i)] /= s;
  }
}

template <typename PF>
void scores_from_energies(const CurParams& p, int64_t n, PF pos, double* out,
                          std::vector<double>& k2, std::vector<double>& v2);

// CUR scores of n rows in position order; row i's key / value at k(i) / v(i); pos(i) its
// absolute position (for the sinks).
template <typename KF, typename VF, typename PF>
void cur_scores(const CurParams& p, int64_t n, int64_t D, KF k, VF v, PF pos, double* out,
                std::vector<double>& k2, std::vector<double>& v2) {
  k2.resize(static_cast<size_t>(n));
  v2.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    k2[static_cast<size_t>(i)] = p.energy(k(i), D);
    v2[static_cast<size_t>(i)] = p.energy(v(i), D);
  }
  scores_from_energies(p, n, pos, out, k2, v2);
}

// The rest of cur_scores, from the rows' energies in position order (k2, v2: overwritten).
template <typename PF>
void scores_from_energies(const CurParams& p, int64_t n, PF pos, double* out,
                          std::vector<double>& k2, std::vector<double>& v2) {
  local_normalise(k2, n, p.window);
  local_normalise(v2, n, p.window);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = k2[static_cast<size_t>(i)], b = v2[static_cast<size_t>(i)];
    out[i] = p.leverage == Leverage::Key     ? a
             : p.leverage == Leverage::Value ? b
             : p.leverage == Leverage::KvAvg ? (a + b) / 2
                                             : a * b;
    total += out[i];
  }
  for (int64_t i = 0; i < n; ++i) {
    if (total > 0) out[i] /= total;
    if (pos(i) < p.n_sink) out[i] = 1.0;
  }
}

class CurPaperScorer final : public OneShotScorer {
 public:
  explicit CurPaperScorer(const CacheConfig& c) : c_(c) {}
  void score(const OneShotInput& in, double* out) const override {
    const CurParams p(c_, in.D);
    std::vector<double> k2, v2;
    for (int64_t h = 0; h < in.H; ++h)
      cur_scores(
          p, in.S, in.D, [&](int64_t i) { return in.key(h, i); },
          [&](int64_t i) { return in.value(h, i); }, [&](int64_t i) { return in.pos0 + i; },
          out + h * in.S, k2, v2);
  }

 private:
  CacheConfig c_;
};

class CurPaperCache final : public eviction::EvictionCache {
 public:
  CurPaperCache(const CacheConfig& c, const CacheContext& ctx)
      : EvictionCache(c, ctx, c.get_int("budget"), c.get_int("n_sink")), p_(c, ctx.head_dim) {}

 protected:
  void on_shape_known(int64_t B, int64_t H) override {
    EvictionCache::on_shape_known(B, H);
    heads_.assign(static_cast<size_t>(B * H), Held{});
  }

  // A row's energy depends on that row only: each is computed once, when its token joins (or
  // when the store re-encodes rows), and kept per slot with the slots' position order, so a
  // step is O(n) (the local windows shift after every eviction) instead of re-reading every
  // key and value and sorting the positions again.
  void on_token(eviction::HeadState& st, const float* k, const float* v, const eviction::QueryRows&,
                int64_t pos) override {
    const int64_t slot = append(st, k, v, pos, 0.0);
    Held& h = heads_[head_index(st)];
    if (!over_budget(st)) {
      h.valid = false;  // nothing is scored below the budget: rebuilt at the next overflow
      return;
    }
    const int64_t n = st.n, D = head_dim();
    if (!h.valid || h.generation != st.kv.generation() || h.order.empty() ||
        st.kv.position(h.order.back()) >= pos) {
      rebuild(st, h);
    } else {
      std::vector<float>& row = scratch_->row;
      row.resize(static_cast<size_t>(D));
      h.ek.resize(static_cast<size_t>(n));
      h.ev.resize(static_cast<size_t>(n));
      keys(st).read(slot, 1, row.data());
      h.ek[static_cast<size_t>(slot)] = p_.energy(row.data(), D);
      values(st).read(slot, 1, row.data());
      h.ev[static_cast<size_t>(slot)] = p_.energy(row.data(), D);
      h.order.push_back(slot);  // the newest position comes last
    }
    Buffers& w = scratch_.local();
    std::vector<double>&k2 = w.k2, &v2 = w.v2, &sc = w.sc;
    k2.resize(static_cast<size_t>(n));
    v2.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      k2[static_cast<size_t>(i)] = h.ek[static_cast<size_t>(h.order[static_cast<size_t>(i)])];
      v2[static_cast<size_t>(i)] = h.ev[static_cast<size_t>(h.order[static_cast<size_t>(i)])];
    }
    sc.resize(static_cast<size_t>(n));
    scores_from_energies(
        p_, n, [&](int64_t i) { return st.kv.position(h.order[static_cast<size_t>(i)]); },
        sc.data(), k2, v2);
    for (int64_t i = 0; i < n; ++i)
      st.score[static_cast<size_t>(h.order[static_cast<size_t>(i)])] = sc[static_cast<size_t>(i)];
    evict_lowest(st, std::numeric_limits<int64_t>::max(), [&](int64_t victim, int64_t last) {
      h.order.erase(std::find(h.order.begin(), h.order.end(), victim));
      if (victim != last) {
        *std::find(h.order.begin(), h.order.end(), last) = victim;
        h.ek[static_cast<size_t>(victim)] = h.ek[static_cast<size_t>(last)];
        h.ev[static_cast<size_t>(victim)] = h.ev[static_cast<size_t>(last)];
      }
      h.ek.resize(static_cast<size_t>(st.n));
      h.ev.resize(static_cast<size_t>(st.n));
    });
  }

 private:
  struct Held {
    std::vector<double> ek, ev;  // per slot: the key's / value's energy
    std::vector<int64_t> order;  // slots by increasing position
    int64_t generation = -1;
    bool valid = false;
  };

  void rebuild(const eviction::HeadState& st, Held& h) {
    const int64_t n = st.n, D = head_dim();
    std::vector<float>& row = scratch_->row;
    row.resize(static_cast<size_t>(D));
    h.ek.resize(static_cast<size_t>(n));
    h.ev.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      keys(st).read(i, 1, row.data());
      h.ek[static_cast<size_t>(i)] = p_.energy(row.data(), D);
      values(st).read(i, 1, row.data());
      h.ev[static_cast<size_t>(i)] = p_.energy(row.data(), D);
    }
    h.order.resize(static_cast<size_t>(n));
    std::iota(h.order.begin(), h.order.end(), int64_t{0});
    std::sort(h.order.begin(), h.order.end(),
              [&](int64_t a, int64_t b) { return st.kv.position(a) < st.kv.position(b); });
    h.generation = st.kv.generation();
    h.valid = true;
  }

  CurParams p_;
  std::vector<Held> heads_;
  struct Buffers {
    std::vector<float> row;
    std::vector<double> sc, k2, v2;
  };
  eviction::Scratch<Buffers> scratch_;
  int64_t policy_bytes() const override {
    int64_t b = eviction::buffer_bytes(heads_) + eviction::buffer_bytes(p_.G);
    for (const auto& h : heads_)
      b += eviction::buffer_bytes(h.ek) + eviction::buffer_bytes(h.ev) +
           eviction::buffer_bytes(h.order);
    return b;
  }
};

}  // namespace

MethodInfo curdkv_paper_method_info() {
  MethodInfo m;
  m.id = "curdkv_paper";
  m.family = Family::Eviction;
  m.description =
      "CurDKV as the paper / kvpress CURPress compute it: locally normalised key and value "
      "energies (leverage approximations), product by default";
  m.options = {
      eviction::budget_option(),
      eviction::n_sink_option(),
      opt_choice("leverage", "kv_product", {"key", "value", "kv_avg", "kv_product"},
                 "score: key energy, value energy, their mean, or their product"),
      opt_int("window", 16, 1, 65536, "local window over which energies are normalised (tokens)"),
      opt_choice("projection", "none", {"none", "gaussian"},
                 "energies of the raw rows, or after a fixed Gaussian projection to `rank` dims"),
      opt_int("rank", 20, 1, 4096, "projection dimension (projection=gaussian)"),
      opt_int("seed", 0, 0, kMaxBudget, "seed of the Gaussian projection"),
  };
  eviction::add_head_budget_options(m.options);
  m.validate = [](const CacheConfig& c) { eviction::check_sinks_below_budget(c); };
  m.make_cache = [](const CacheConfig& c, const CacheContext& ctx) -> std::unique_ptr<KVCache> {
    return std::make_unique<CurPaperCache>(c, ctx);
  };
  m.make_scorer = [](const CacheConfig& c) -> std::unique_ptr<OneShotScorer> {
    return std::make_unique<CurPaperScorer>(c);
  };
  return m;
}

}  // namespace vq

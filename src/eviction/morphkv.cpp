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
//
// maps=cached (default) keeps each probe row's exponentiated logits over the kept slots,
// E[r, i] = exp(K_i . q_r / sqrt(D) - m_r) with m_r the row's largest visible logit when it was
// computed (0 where slot i is hidden from the probe). Keys never change in place and a newer
// token is hidden from every older probe, so a row is computed once, when its probe arrives; an
// eviction only moves a column. A step then costs one attention pass for the new probe plus
// O(window * n) adds for the normalisers Z_r = sum_i E[r, i] and the fused scores, instead of
// `window` attention passes (maps=recompute, the literal rule). Same softmax up to rounding.
#include <algorithm>
#include <cmath>
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
        use_queries_(c.get_string("query") == "true"),
        cached_(c.get_string("maps") == "cached") {}

 protected:
  void on_shape_known(int64_t B, int64_t H) override {
    EvictionCache::on_shape_known(B, H);
    rings_.assign(static_cast<size_t>(B * H), eviction::ProbeRing{});
    for (auto& r : rings_) r.reset(window_, head_dim());
    maps_.assign(static_cast<size_t>(B * H), Maps{});
  }

  void on_token(eviction::HeadState& st, const float* k, const float* v,
                const eviction::QueryRows& q, int64_t pos) override {
    eviction::ProbeRing& ring = rings_[head_index(st)];
    ring.push(pos, k, q, use_queries_);
    append(st, k, v, pos, 0.0);
    Maps& m = maps_[head_index(st)];
    if (!over_budget(st)) {
      m.valid = false;  // nothing is scored below the budget: rebuilt at the next overflow
      return;
    }
    if (!cached_) {
      eviction::AttnScratch& w = scratch_.local();
      eviction::window_attention(keys(st), st.n, st.kv.positions(), ring, fusion_, w);
      std::copy_n(w.out.begin(), st.n, st.score.begin());
      evict_lowest(st, std::numeric_limits<int64_t>::max());
      return;
    }
    if (!m.valid || m.generation != st.kv.generation() || m.rows != ring.row_capacity()) {
      rebuild(st, ring, m);
    } else {
      add_newest(st, ring, m);
    }
    score_from_maps(st, ring, m);
    evict_lowest(st, std::numeric_limits<int64_t>::max(), [&](int64_t victim, int64_t last) {
      for (int64_t r = 0; r < m.rows; ++r) {
        const size_t ri = static_cast<size_t>(r);
        const double gone = static_cast<double>(m.E[m.at(r, victim)]);
        if (gone > 0) {
          const double z = m.Z[ri] - gone;
          if (z >= 0.5 * m.Z[ri]) {
            m.Z[ri] = z;
          } else {
            m.z_ok[ri] = 0;
          }
        }
        if (victim != last) m.E[m.at(r, victim)] = m.E[m.at(r, last)];
      }
    });
  }

 private:
  // One head's exponentiated probe logits: row r (ring row index) over slots [0, n).
  struct Maps {
    std::vector<float> E;  // [rows, cap] row-major
    // per row: Z = sum of its entries, carried across evictions (minus the evicted entry);
    // recomputed when a subtraction would lose more than half of it (or when not current)
    std::vector<double> Z;
    std::vector<uint8_t> z_ok;
    int64_t rows = 0, cap = 0, generation = -1;
    bool valid = false;
    size_t at(int64_t r, int64_t i) const { return static_cast<size_t>(r * cap + i); }
  };

  void ensure_capacity(Maps& m, int64_t rows, int64_t n) {
    if (m.rows == rows && m.cap >= n) return;
    const int64_t cap = std::max<int64_t>(n, 2 * m.cap);
    std::vector<float> E(static_cast<size_t>(rows * cap), 0.0f);
    if (m.rows == rows)
      for (int64_t r = 0; r < rows; ++r)
        std::copy_n(m.E.begin() + static_cast<std::ptrdiff_t>(r * m.cap), m.cap,
                    E.begin() + static_cast<std::ptrdiff_t>(r * cap));
    m.E.swap(E);
    if (m.rows != rows) {
      m.Z.assign(static_cast<size_t>(rows), 0.0);
      m.z_ok.assign(static_cast<size_t>(rows), 0);
    }
    m.rows = rows;
    m.cap = cap;
  }

  // Row r of the maps for probe row (w, g) over slots [0, n): causal softmax numerators.
  void compute_row(const eviction::HeadState& st, const eviction::ProbeRing& ring, int64_t w,
                   int64_t g, Maps& m) {
    const int64_t n = st.n;
    float* e = m.E.data() + m.at(ring.row_index(w, g), 0);
    eviction::row_dots(keys(st), n, ring.row(w, g), e);
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim()));
    const int64_t* pos = st.kv.positions();
    const int64_t p = ring.pos(w);
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) {
      e[i] = pos[i] > p ? -std::numeric_limits<float>::infinity() : e[i] * scale;
      mx = std::max(mx, e[i]);
    }
    const size_t r = static_cast<size_t>(ring.row_index(w, g));
    m.z_ok[r] = 0;
    if (mx == -std::numeric_limits<float>::infinity()) {  // sees nothing kept
      std::fill(e, e + n, 0.0f);
      return;
    }
    eviction::exp_shifted_f(e, n, mx);
  }

  void rebuild(const eviction::HeadState& st, const eviction::ProbeRing& ring, Maps& m) {
    ensure_capacity(m, ring.row_capacity(), st.n);
    for (int64_t w = 0; w < ring.size(); ++w)
      for (int64_t g = 0; g < ring.rows(w); ++g) compute_row(st, ring, w, g, m);
    m.generation = st.kv.generation();
    m.valid = true;
  }

  // The newest token joined at slot n - 1 and its probe replaced the oldest ring entry: older
  // probes cannot see it (0 in their rows), the new probe's rows are computed in full.
  void add_newest(const eviction::HeadState& st, const eviction::ProbeRing& ring, Maps& m) {
    ensure_capacity(m, ring.row_capacity(), st.n);
    const int64_t slot = st.n - 1, newest = ring.size() - 1;
    for (int64_t w = 0; w < newest; ++w)
      for (int64_t g = 0; g < ring.rows(w); ++g) m.E[m.at(ring.row_index(w, g), slot)] = 0.0f;
    for (int64_t g = 0; g < ring.rows(newest); ++g) compute_row(st, ring, newest, g, m);
  }

  // st.score = fuse over the window's probes of mean_g E[r] / Z_r.
  void score_from_maps(eviction::HeadState& st, const eviction::ProbeRing& ring, Maps& m) {
    const int64_t n = st.n;
    eviction::AttnScratch& scratch = scratch_.local();
    scratch.ensure(n);
    double* o = st.score.data();
    double* acc = scratch.acc.data();
    std::fill(o, o + n, 0.0);
    const bool sum = fusion_ == eviction::Fusion::Sum;
    auto& rows = scratch.terms;  // sum fusion: (weight, row) of every probe row, in add order
    rows.clear();
    for (int64_t w = 0; w < ring.size(); ++w) {
      const int64_t G = ring.rows(w);
      const double inv_g = 1.0 / static_cast<double>(G);
      if (!sum) std::fill(acc, acc + n, 0.0);
      for (int64_t g = 0; g < G; ++g) {
        const size_t r = static_cast<size_t>(ring.row_index(w, g));
        const float* e = m.E.data() + m.at(ring.row_index(w, g), 0);
        if (!m.z_ok[r]) {
          m.Z[r] = eviction::sum_fixed(e, n);
          m.z_ok[r] = 1;
        }
        if (!(m.Z[r] >= 1e-30)) {  // mass underflowed once its largest entries left: recompute
          compute_row(st, ring, w, g, m);
          m.Z[r] = eviction::sum_fixed(e, n);
          m.z_ok[r] = 1;
        }
        const double z = m.Z[r];
        if (!(z > 0)) continue;  // sees nothing kept
        // sum fusion is linear: each probe row adds straight into the scores (below, in order)
        if (sum) {
          rows.emplace_back(inv_g / z, e);
          continue;
        }
        const double c = 1.0 / z;
        for (int64_t i = 0; i < n; ++i) acc[i] += c * static_cast<double>(e[i]);
      }
      if (sum) continue;
      if (w == 0) {
        for (int64_t i = 0; i < n; ++i) o[i] = acc[i] * inv_g;
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = std::max(o[i], acc[i] * inv_g);
      }
    }
    // Four rows per pass over the scores: each score still takes the rows' terms one after the
    // other in row order (the same sums as one pass per row), with a quarter of the passes.
    size_t r = 0;
    for (; r + 4 <= rows.size(); r += 4) {
      const double c0 = rows[r].first, c1 = rows[r + 1].first, c2 = rows[r + 2].first,
                   c3 = rows[r + 3].first;
      const float *e0 = rows[r].second, *e1 = rows[r + 1].second, *e2 = rows[r + 2].second,
                  *e3 = rows[r + 3].second;
      for (int64_t i = 0; i < n; ++i) {
        double x = o[i];
        x += c0 * static_cast<double>(e0[i]);
        x += c1 * static_cast<double>(e1[i]);
        x += c2 * static_cast<double>(e2[i]);
        x += c3 * static_cast<double>(e3[i]);
        o[i] = x;
      }
    }
    for (; r < rows.size(); ++r) {
      const double c = rows[r].first;
      const float* e = rows[r].second;
      for (int64_t i = 0; i < n; ++i) o[i] += c * static_cast<double>(e[i]);
    }
  }

  int64_t window_;
  eviction::Fusion fusion_;
  bool use_queries_;
  bool cached_;
  std::vector<eviction::ProbeRing> rings_;  // one per (b, h)
  std::vector<Maps> maps_;                  // one per (b, h) (maps=cached)
  eviction::Scratch<eviction::AttnScratch> scratch_;
  int64_t policy_bytes() const override {
    int64_t b = eviction::buffer_bytes(rings_) + eviction::buffer_bytes(maps_);
    for (const auto& r : rings_) b += r.bytes();
    for (const auto& m : maps_)
      b += eviction::buffer_bytes(m.E) + eviction::buffer_bytes(m.Z) +
           eviction::buffer_bytes(m.z_ok);
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
      opt_choice("maps", "cached", {"cached", "recompute"},
                 "keep each probe's attention over the kept tokens between steps (one "
                 "attention pass per step; window x n floats per head), or recompute the window's "
                 "attention every step"),
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

// `qfilters` (Godey et al., "Q-Filters: Leveraging QK Geometry for Efficient KV Cache
// Compression", 2025): score each key by its projection on one per-head direction, a "filter"
// that predicts which keys will be attended, without computing any attention.
//
// The filter u (unit, [D]) is fixed once per head at prefill and frozen afterwards:
//   u = first right singular vector of the prompt keys K [T, D] (the top eigenvector of the
//       D x D Gram matrix K^T K, in double), sign chosen so that u . mean(K) >= 0.
// Prefill is the first update call carrying more than one token, or, if the cache overflows
// first (one token at a time), the tokens held at that overflow.
// Score of a token: s = k . u. Over budget, the lowest s outside the sinks leaves.
// Sign convention: the logit of a key under the key-as-query proxy is q . k with q distributed
// like the keys, whose mean points along +u; so a larger k . u predicts more attention and the
// keys kept are those with the largest projection on +u.
// Adaptation: the paper estimates the filter offline from the *queries* of a calibration set; a
// cache has no calibration data, so this uses the spec's frozen key-SVD direction of the prompt.
#include <limits>

#include "core/options.hpp"
#include "eviction/eviction_cache.hpp"
#include "eviction/methods.hpp"
#include "eviction/one_shot.hpp"

namespace vq {
namespace {

class QFiltersCache final : public eviction::EvictionCache {
 public:
  QFiltersCache(const CacheConfig& c, const CacheContext& ctx)
      : EvictionCache(c, ctx, c.get_int("budget"), c.get_int("n_sink")) {}

 protected:
  void on_shape_known(int64_t B, int64_t H) override {
    EvictionCache::on_shape_known(B, H);
    filters_ = eviction::RowMatD::Zero(B * H, head_dim());
    fixed_.assign(static_cast<size_t>(B * H), 0);
  }

  void process_head(eviction::HeadState& st, const float* K, const float* V,
                    const std::vector<eviction::QueryRows>&, int64_t S, int64_t pos0) override {
    const size_t idx = head_index(st);
    const int64_t D = head_dim();
    if (!fixed_[idx] && S > 1) fix_filter(st, idx, K, S);
    for (int64_t s = 0; s < S; ++s) {
      const float* k = K + s * D;
      append(st, k, V + s * D, pos0 + s, fixed_[idx] ? project(idx, k) : 0.0);
      if (!over_budget(st)) continue;
      if (!fixed_[idx]) fix_filter(st, idx, nullptr, 0);
      evict_lowest(st, std::numeric_limits<int64_t>::max());
    }
  }

 private:
  double project(size_t idx, const float* k) const {
    const Eigen::Map<const Eigen::VectorXf> kv(k, head_dim());
    return filters_.row(static_cast<Eigen::Index>(idx)).dot(kv.cast<double>());
  }

  // Estimates the filter from the held keys plus S chunk keys, then scores the held keys.
  void fix_filter(eviction::HeadState& st, size_t idx, const float* K, int64_t S) {
    const int64_t D = head_dim();
    Buffers& w = scratch_.local();
    Eigen::MatrixXd& gram = w.gram;
    Eigen::VectorXd& sum = w.sum;
    gram.setZero(D, D);
    sum.setZero(D);
    if (st.n > 0) {  // the held keys, block by block
      std::vector<float> buf;
      store::for_each_block(keys(st), buf, [&](int64_t, int64_t m, const float* rows) {
        const eviction::RowMatD held =
            Eigen::Map<const eviction::RowMatF>(rows, m, D).cast<double>();
        gram.noalias() += held.transpose() * held;
        sum += held.colwise().sum().transpose();
      });
    }
    if (S > 0) {
      const eviction::RowMatD chunk = Eigen::Map<const eviction::RowMatF>(K, S, D).cast<double>();
      gram.noalias() += chunk.transpose() * chunk;
      sum += chunk.colwise().sum().transpose();
    }
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(gram);
    Eigen::VectorXd u = eig.eigenvectors().col(D - 1);  // eigenvalues ascending: last is largest
    if (u.dot(sum) < 0) u = -u;
    filters_.row(static_cast<Eigen::Index>(idx)) = u.transpose();
    fixed_[idx] = 1;
    std::vector<float> buf;
    store::for_each_block(keys(st), buf, [&](int64_t first, int64_t m, const float* rows) {
      for (int64_t i = 0; i < m; ++i)
        st.score[static_cast<size_t>(first + i)] = project(idx, rows + i * D);
    });
  }

  eviction::RowMatD filters_;  // [B * H, D], row b * H + h is that head's filter
  std::vector<char> fixed_;
  struct Buffers {
    Eigen::MatrixXd gram;
    Eigen::VectorXd sum;
  };
  eviction::Scratch<Buffers> scratch_;
  int64_t policy_bytes() const override {
    return eviction::buffer_bytes(filters_) + eviction::buffer_bytes(fixed_);
  }
};

// One shot: the filter u of KV head h is the top right singular vector of the context's queries
// of its group (all G query heads, all S positions, after RoPE), signed so that u . sum(q) >= 0;
// the score is k . u (the keys that the average query favours). Without queries, the keys'
// own top direction (the decode variant's rule). kvpress's QFilterPress instead loads filters
// learned offline per model and scores -(filter . k); no such filters exist for these models.
class QFiltersScorer final : public OneShotScorer {
 public:
  void score(const OneShotInput& in, double* out) const override {
    const int64_t D = in.D, S = in.S, G = in.probes(true);
    for (int64_t h = 0; h < in.H; ++h) {
      Eigen::MatrixXd gram = Eigen::MatrixXd::Zero(D, D);
      Eigen::VectorXd sum = Eigen::VectorXd::Zero(D);
      for (int64_t g = 0; g < G; ++g) {
        const Eigen::Map<const eviction::RowMatF> P(in.probe(true, h, g, 0), S, D);
        const eviction::RowMatD Pd = P.cast<double>();
        gram.noalias() += Pd.transpose() * Pd;
        sum += Pd.colwise().sum().transpose();
      }
      Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(gram);
      Eigen::VectorXd u = eig.eigenvectors().col(D - 1);
      if (u.dot(sum) < 0) u = -u;
      for (int64_t s = 0; s < S; ++s)
        out[h * S + s] = Eigen::Map<const Eigen::VectorXf>(in.key(h, s), D).cast<double>().dot(u);
    }
  }
};

}  // namespace

MethodInfo qfilters_method_info() {
  MethodInfo m;
  m.id = "qfilters";
  m.family = Family::Eviction;
  m.description =
      "keep the keys with the largest projection on a per-head key-SVD direction frozen at prefill";
  m.options = {
      eviction::budget_option(),
      eviction::n_sink_option(),
  };
  eviction::add_head_budget_options(m.options);
  m.validate = [](const CacheConfig& c) { eviction::check_sinks_below_budget(c); };
  m.make_cache = [](const CacheConfig& c, const CacheContext& ctx) -> std::unique_ptr<KVCache> {
    return std::make_unique<QFiltersCache>(c, ctx);
  };
  m.make_scorer = [](const CacheConfig&) -> std::unique_ptr<OneShotScorer> {
    return std::make_unique<QFiltersScorer>();
  };
  return m;
}

}  // namespace vq

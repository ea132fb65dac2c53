// One-shot scoring for the seed's `curdkv` (the prefill protocol). The decode rule accumulates,
// token by token, the leverage of each row of the attention-weighted value block W = a ⊙ V.
// Over a prefilled context the same sum is taken over an observation window: for each of the
// last min(32, S) context positions t, a = the causal attention of t's queries (mean over the
// KV head's group; the key as proxy without queries or with query=proxy) over tokens 0..t,
// W = a ⊙ V[0..t], and every row j <= t adds its energy-weighted leverage over the top
// min(rank_cap, t + 1, D) directions of W. The first n_sink positions get +inf (kept), as the
// decode rule never evicts them; `recent` positions at the end of the context likewise.
// No kvpress press computes this (kvpress's CURPress is `curdkv_paper`).
#include <limits>
#include <vector>

#include "eviction/leverage.hpp"
#include "eviction/one_shot.hpp"

namespace vq::eviction {

namespace {

constexpr int64_t kProbes = 32;

class CurDKVScorer final : public OneShotScorer {
 public:
  explicit CurDKVScorer(const CacheConfig& c)
      : rank_cap_(c.get_int("rank_cap")),
        n_sink_(c.get_int("n_sink")),
        recent_(c.get_int("recent")),
        use_queries_(c.get_string("query") == "true") {}

  void score(const OneShotInput& in, double* out) const override {
    const int64_t S = in.S, D = in.D, G = in.probes(use_queries_);
    std::vector<double> a(static_cast<size_t>(S)), acc(static_cast<size_t>(S)),
        lev(static_cast<size_t>(S));
    RowMatD W(S, D);
    for (int64_t h = 0; h < in.H; ++h) {
      double* o = out + h * S;
      std::fill(o, o + S, 0.0);
      for (int64_t t = std::max<int64_t>(0, S - kProbes); t < S; ++t) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t g = 0; g < G; ++g) {
          causal_attention(in.key(h, 0), S, D, in.probe(use_queries_, h, g, t), t, a.data());
          for (int64_t j = 0; j <= t; ++j)
            acc[static_cast<size_t>(j)] += a[static_cast<size_t>(j)] / static_cast<double>(G);
        }
        for (int64_t j = 0; j <= t; ++j)
          W.row(j) = acc[static_cast<size_t>(j)] *
                     Eigen::Map<const Eigen::RowVectorXf>(in.value(h, j), D).cast<double>();
        leverage_fast(W.data(), t + 1, D, rank_cap_, lev.data());
        for (int64_t j = 0; j <= t; ++j) o[j] += lev[static_cast<size_t>(j)];
      }
      for (int64_t s = 0; s < S; ++s)
        if (in.pos0 + s < n_sink_ || s >= S - recent_)
          o[s] = std::numeric_limits<double>::infinity();
    }
  }

 private:
  int64_t rank_cap_, n_sink_, recent_;
  bool use_queries_;
};

}  // namespace

std::unique_ptr<OneShotScorer> make_curdkv_scorer(const CacheConfig& c) {
  return std::make_unique<CurDKVScorer>(c);
}

}  // namespace vq::eviction

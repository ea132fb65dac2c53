// `snapkv` (Li et al., "SnapKV: LLM Knows What You are Looking for Before Generation",
// NeurIPS 2024): one-shot compression of the prompt.
//
// Prefill is the first update call that carries more than one token; if the cache overflows
// before any such call (an engine feeding one token at a time), the tokens held at that moment
// are the prompt. At prefill, with T prompt tokens (positions 0..T-1):
//   w      = min(window, T, budget - sinks)  observation window: the last w positions
//   a_j    = sum over the w window probes p of mean_g softmax_{i <= pos_p}(K_i . q_{p,g}/sqrt(D))_j
//            (probe = true query rows when supplied and query=true, else the token's key)
//   s_j    = max or mean of a over the prefix positions j - kernel/2 .. j + kernel/2 (prefix =
//            the T - w positions before the window; the mean counts only in-range neighbours)
// Kept: the sinks, the window, and the budget - w - sinks prefix tokens with the highest s
// (ties: the later position stays). Shorter prompts are kept whole (and still scored).
//
// Decode (every token after prefill, including later multi-token calls) is appended. When the
// budget is reached during decode, the scored prompt tokens are drained first, lowest s first;
// once only sinks, the window and generated tokens remain, the oldest of those leaves (a
// sliding window). The paper lets decode tokens grow the cache without bound; here the budget
// is a hard limit, so something has to give.
#include <algorithm>
#include <limits>

#include "core/options.hpp"
#include "eviction/attention_window.hpp"
#include "eviction/methods.hpp"
#include "eviction/one_shot.hpp"
#include "veloxquant/errors.hpp"

namespace vq {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

class SnapKVCache final : public eviction::ChunkScoringCache {
 public:
  SnapKVCache(const CacheConfig& c, const CacheContext& ctx)
      : ChunkScoringCache(c, ctx, c.get_int("budget"), c.get_int("n_sink")),
        window_(c.get_int("window")),
        kernel_(c.get_int("kernel")),
        max_pool_(c.get_string("pool") == "max"),
        use_queries_(c.get_string("query") == "true") {}

 protected:
  void on_shape_known(int64_t B, int64_t H) override {
    EvictionCache::on_shape_known(B, H);
    rings_.assign(static_cast<size_t>(B * H), eviction::ProbeRing{});
    for (auto& r : rings_) r.reset(window_, head_dim());
    prefilled_.assign(static_cast<size_t>(B * H), 0);
  }

  void process_head(eviction::HeadState& st, const float* K, const float* V,
                    const std::vector<eviction::QueryRows>& q, int64_t S, int64_t pos0) override {
    const size_t idx = head_index(st);
    const int64_t D = head_dim();
    eviction::ProbeRing& ring = rings_[idx];
    if (!prefilled_[idx] && S > 1) {  // the prompt: score it and keep the best in one round
      for (int64_t s = std::max<int64_t>(0, S - window_); s < S; ++s)
        ring.push(pos0 + s, K + s * D, q[static_cast<size_t>(s)], use_queries_);
      prefill(st, ring, K, V, S, pos0);
      prefilled_[idx] = 1;
      return;
    }
    for (int64_t s = 0; s < S; ++s) {
      const int64_t pos = pos0 + s;
      if (!prefilled_[idx]) ring.push(pos, K + s * D, q[static_cast<size_t>(s)], use_queries_);
      append(st, K + s * D, V + s * D, pos, kInf);
      if (!over_budget(st)) continue;
      if (!prefilled_[idx]) {  // overflow before any multi-token call: what is held is the prompt
        prefill(st, ring, nullptr, nullptr, 0, pos + 1);
        prefilled_[idx] = 1;
      } else {
        evict_lowest(st, std::numeric_limits<int64_t>::max());
      }
    }
  }

 private:
  // Scores the held rows plus the S chunk rows as the prompt, keeps the best `budget` of them.
  void prefill(eviction::HeadState& st, const eviction::ProbeRing& ring, const float* K,
               const float* V, int64_t S, int64_t pos0) {
    const int64_t T = gather(st, K, S, pos0);
    Chunk& c = chunk();
    std::vector<int64_t>& prefix = prefix_.local().rows;
    int64_t sinks = 0;
    for (int64_t t = 0; t < T; ++t) sinks += c.all_pos[static_cast<size_t>(t)] < n_sink() ? 1 : 0;
    const int64_t w = std::min({window_, T, ring.size(), budget() - sinks});
    const int64_t first = ring.size() - w;
    const int64_t window_start = w > 0 ? ring.pos(first) : std::numeric_limits<int64_t>::max();

    const size_t Tz = static_cast<size_t>(T);
    c.score.resize(Tz);
    c.attn.ensure(T);
    std::vector<double>& attn = c.attn.out;
    if (w > 0)
      eviction::window_attention(*c.all_K, T, c.all_pos.data(), ring, eviction::Fusion::Sum, c.attn,
                                 first);
    else
      std::fill(attn.begin(), attn.end(), 0.0);

    // Pool over the prefix in position order.
    prefix.clear();
    for (int64_t t = 0; t < T; ++t)
      if (c.all_pos[static_cast<size_t>(t)] < window_start) prefix.push_back(t);
    std::sort(prefix.begin(), prefix.end(), [&](int64_t a, int64_t b) {
      return c.all_pos[static_cast<size_t>(a)] < c.all_pos[static_cast<size_t>(b)];
    });
    const int64_t P = static_cast<int64_t>(prefix.size());
    const int64_t half = kernel_ / 2;
    for (int64_t r = 0; r < P; ++r) {
      const int64_t lo = std::max<int64_t>(0, r - half), hi = std::min<int64_t>(P - 1, r + half);
      double pooled = max_pool_ ? -kInf : 0.0;
      for (int64_t u = lo; u <= hi; ++u) {
        const double a = attn[static_cast<size_t>(prefix[static_cast<size_t>(u)])];
        pooled = max_pool_ ? std::max(pooled, a) : pooled + a;
      }
      if (!max_pool_) pooled /= static_cast<double>(hi - lo + 1);
      c.score[static_cast<size_t>(prefix[static_cast<size_t>(r)])] = pooled;
    }
    for (int64_t t = 0; t < T; ++t)
      if (c.all_pos[static_cast<size_t>(t)] >= window_start) c.score[static_cast<size_t>(t)] = kInf;

    eviction::lowest_evictable(c.score.data(), c.all_pos.data(), T, n_sink(), T - budget(), c.order,
                               c.victims);
    mark_victims(T);
    commit(st, K, V, S, pos0, c.score.data());
  }

  int64_t window_, kernel_;
  bool max_pool_, use_queries_;
  std::vector<eviction::ProbeRing> rings_;  // one per (b, h), used until prefill
  std::vector<char> prefilled_;
  struct Prefix {
    std::vector<int64_t> rows;  // the prefix's rows in position order
  };
  eviction::Scratch<Prefix> prefix_;
  int64_t policy_bytes() const override {
    int64_t b = eviction::buffer_bytes(rings_) + eviction::buffer_bytes(prefilled_);
    for (const auto& r : rings_) b += r.bytes();
    return b;
  }
};

// One shot (kvpress's SnapKVPress; its defaults are window=64,kernel=5,pool=avg): each query
// head of the group attends causally from the last `window` context positions; the attention
// on the S - window earlier tokens is averaged over those probes, pooled over `kernel`
// neighbours (avg: zero padding, always divided by kernel, as avg_pool1d; max: out-of-range
// neighbours ignored), then averaged over the group. The window's own tokens get the layer's
// largest score. Needs S > window.
class SnapKVScorer final : public OneShotScorer {
 public:
  explicit SnapKVScorer(const CacheConfig& c)
      : window_(c.get_int("window")),
        kernel_(c.get_int("kernel")),
        max_pool_(c.get_string("pool") == "max"),
        use_queries_(c.get_string("query") == "true") {}
  void score(const OneShotInput& in, double* out) const override {
    const int64_t S = in.S, w = window_, P = S - w, G = in.probes(use_queries_), half = kernel_ / 2;
    VQ_CHECK(S > w, InvalidArgument, "snapkv one-shot: the context holds S = ", S,
             " tokens; it must be longer than window = ", w);
    std::vector<double> a(static_cast<size_t>(S)), mean(static_cast<size_t>(P));
    double mx = -kInf;
    for (int64_t h = 0; h < in.H; ++h) {
      double* o = out + h * S;
      std::fill(o, o + S, 0.0);
      for (int64_t g = 0; g < G; ++g) {
        std::fill(mean.begin(), mean.end(), 0.0);
        for (int64_t t = P; t < S; ++t) {
          eviction::causal_attention(in.key(h, 0), S, in.D, in.probe(use_queries_, h, g, t), t,
                                     a.data());
          for (int64_t j = 0; j < P; ++j) mean[static_cast<size_t>(j)] += a[static_cast<size_t>(j)];
        }
        for (double& m : mean) m /= static_cast<double>(w);
        for (int64_t j = 0; j < P; ++j) {
          const int64_t lo = std::max<int64_t>(0, j - half),
                        hi = std::min<int64_t>(P - 1, j + half);
          double pooled = max_pool_ ? -kInf : 0.0;
          for (int64_t u = lo; u <= hi; ++u)
            pooled = max_pool_ ? std::max(pooled, mean[static_cast<size_t>(u)])
                               : pooled + mean[static_cast<size_t>(u)];
          if (!max_pool_) pooled /= static_cast<double>(kernel_);
          o[j] += pooled / static_cast<double>(G);
        }
      }
      for (int64_t j = 0; j < P; ++j) mx = std::max(mx, o[j]);
    }
    for (int64_t h = 0; h < in.H; ++h) std::fill(out + h * S + P, out + (h + 1) * S, mx);
  }

 private:
  int64_t window_, kernel_;
  bool max_pool_, use_queries_;
};

}  // namespace

MethodInfo snapkv_method_info() {
  MethodInfo m;
  m.id = "snapkv";
  m.family = Family::Eviction;
  m.description =
      "one-shot prompt compression by the pooled attention of the last `window` positions";
  m.options = {
      eviction::budget_option(),
      eviction::n_sink_option(),
      opt_int("window", 32, 1, 65536,
              "observation window: last prompt positions that vote (and are kept); clamped to "
              "budget - sinks"),
      opt_int("kernel", 7, 1, 1023, "pooling width over neighbouring prompt positions (odd)"),
      opt_choice("pool", "max", {"max", "avg"}, "pooling of the votes over the kernel"),
      opt_choice("query", "true", {"true", "proxy"},
                 "window probes: true queries when supplied, or the keys as proxies"),
  };
  eviction::add_head_budget_options(m.options);
  m.validate = [](const CacheConfig& c) {
    eviction::check_sinks_below_budget(c);
    VQ_CHECK(c.get_int("kernel") % 2 == 1, InvalidArgument, c.method(),
             ": kernel = ", c.get_int("kernel"), " must be odd (centred pooling)");
  };
  m.make_cache = [](const CacheConfig& c, const CacheContext& ctx) -> std::unique_ptr<KVCache> {
    return std::make_unique<SnapKVCache>(c, ctx);
  };
  m.make_scorer = [](const CacheConfig& c) -> std::unique_ptr<OneShotScorer> {
    return std::make_unique<SnapKVScorer>(c);
  };
  return m;
}

}  // namespace vq

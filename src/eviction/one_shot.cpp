#include "eviction/one_shot.hpp"
#include "eviction/one_shot_spec.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"

namespace vq::eviction {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// A NaN score never wins a slot (and keeps the orderings below strict weak orders).
double clean(double s) {
  return std::isnan(s) ? kNegInf : s;
}

}  // namespace

int64_t one_shot_keep(int64_t S, double ratio) {
  VQ_CHECK(ratio >= 0.0 && ratio < 1.0, InvalidArgument, "compression ratio = ", ratio,
           " is outside [0, 1) (the fraction of context tokens removed per KV head)");
  VQ_CHECK(S >= 0, InvalidArgument, "one_shot_keep: S = ", S, " must be >= 0");
  if (S == 0) return 0;
  // int() of the product as kvpress writes it (truncation, no rounding guard).
  const auto kept = static_cast<int64_t>(static_cast<double>(S) * (1.0 - ratio));
  return std::clamp<int64_t>(kept, 1, S);
}

std::vector<std::vector<int64_t>> keep_top(const double* scores, int64_t H, int64_t S,
                                           int64_t n_keep) {
  const int64_t m = std::clamp<int64_t>(n_keep, 0, S);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(H));
  std::vector<int64_t> idx(static_cast<size_t>(S));
  for (int64_t h = 0; h < H; ++h) {
    const double* s = scores + h * S;
    std::iota(idx.begin(), idx.end(), int64_t{0});
    std::partial_sort(idx.begin(), idx.begin() + m, idx.end(), [&](int64_t a, int64_t b) {
      const double x = clean(s[a]), y = clean(s[b]);
      return x != y ? x > y : a > b;
    });
    auto& k = out[static_cast<size_t>(h)];
    k.assign(idx.begin(), idx.begin() + m);
    std::sort(k.begin(), k.end());
  }
  return out;
}

std::vector<std::vector<int64_t>> keep_top_adaptive(const double* scores, int64_t H, int64_t S,
                                                    int64_t n_keep, double alpha) {
  VQ_CHECK(alpha >= 0.0 && alpha <= 1.0, InvalidArgument, "adakv: alpha = ", alpha,
           " is outside [0, 1]");
  const int64_t m = std::clamp<int64_t>(n_keep, 0, S);
  const auto n_safe = static_cast<int64_t>(static_cast<double>(m) * alpha);
  // Each head's secured tokens get +inf, then one ranking over the whole layer.
  std::vector<double> eff(static_cast<size_t>(H * S));
  for (int64_t i = 0; i < H * S; ++i) eff[static_cast<size_t>(i)] = clean(scores[i]);
  const auto secured = keep_top(eff.data(), H, S, n_safe);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t j : secured[static_cast<size_t>(h)])
      eff[static_cast<size_t>(h * S + j)] = std::numeric_limits<double>::infinity();
  std::vector<int64_t> idx(static_cast<size_t>(H * S));
  std::iota(idx.begin(), idx.end(), int64_t{0});
  const int64_t total = H * m;
  std::partial_sort(idx.begin(), idx.begin() + total, idx.end(), [&](int64_t a, int64_t b) {
    const double x = eff[static_cast<size_t>(a)], y = eff[static_cast<size_t>(b)];
    if (x != y) return x > y;
    if (a % S != b % S) return a % S > b % S;  // the later token
    return a / S < b / S;                      // then the lower head
  });
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(H));
  for (int64_t i = 0; i < total; ++i)
    out[static_cast<size_t>(idx[static_cast<size_t>(i)] / S)].push_back(
        idx[static_cast<size_t>(i)] % S);
  for (auto& k : out) std::sort(k.begin(), k.end());
  return out;
}

void causal_attention(const float* K, int64_t S, int64_t D, const float* q, int64_t upto,
                      double* out) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const int64_t n = std::min(upto + 1, S);
  double mx = kNegInf;
  for (int64_t j = 0; j < n; ++j) {
    double d = 0;
    for (int64_t t = 0; t < D; ++t) d += static_cast<double>(K[j * D + t]) * q[t];
    out[j] = d * scale;
    mx = std::max(mx, out[j]);
  }
  double z = 0;
  for (int64_t j = 0; j < n; ++j) z += (out[j] = std::exp(out[j] - mx));
  for (int64_t j = 0; j < n; ++j) out[j] /= z;
  for (int64_t j = n; j < S; ++j) out[j] = 0.0;
}

std::string OneShotSpec::to_string() const {
  if (!adaptive || by_option) return method.to_string();
  std::string a = "adakv";
  if (alpha != 0.2) a += detail::cat(":alpha=", alpha);
  return a + "/" + method.to_string();
}

std::pair<std::string, std::string> split_head_budget(const std::string& spec) {
  const size_t slash = spec.find('/');
  const bool prefixed =
      slash != std::string::npos && (spec.rfind("adakv/", 0) == 0 || spec.rfind("adakv:", 0) == 0);
  if (!prefixed) return {spec, ""};
  return {spec.substr(slash + 1), spec.substr(0, slash)};
}

bool is_codec_alone(const std::string& spec) {
  const auto [rest, head] = split_head_budget(spec);
  if (!head.empty()) return false;
  return find_method(CacheConfig::parse(rest).method()).family == Family::Transform;
}

OneShotSpec parse_one_shot(const std::string& spec) {
  OneShotSpec out;
  const auto [rest, head] = split_head_budget(spec);
  if (!head.empty()) {
    out.adaptive = true;
    if (head != "adakv") {
      const std::string pre = "adakv:alpha=";
      VQ_CHECK(head.rfind(pre, 0) == 0, InvalidArgument, "one-shot spec '", spec,
               "': the head-budget prefix must be 'adakv/' or 'adakv:alpha=A/'");
      const std::string a = head.substr(pre.size());
      size_t used = 0;
      double v = 0;
      try {
        v = std::stod(a, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      VQ_CHECK(used == a.size() && !a.empty(), InvalidArgument, "one-shot spec '", spec,
               "': alpha '", a, "' is not a number");
      VQ_CHECK(v >= 0.0 && v <= 1.0, InvalidArgument, "adakv: alpha = ", v, " is outside [0, 1]");
      out.alpha = v;
    }
  }
  out.method = CacheConfig::parse(rest);
  const MethodInfo& m = find_method(out.method.method());
  VQ_CHECK(m.family == Family::Eviction, InvalidArgument,
           "one-shot compression needs an eviction "
           "method; '",
           m.id, "' is a transform method (compose it: 'snapkv+", m.id, "')");
  VQ_CHECK(static_cast<bool>(m.make_scorer), InvalidArgument, "method '", m.id,
           "' has no one-shot scoring (the prefill protocol and --compress-ratio need one; "
           "see docs/methods.md for the methods that have it)");
  // The method's own option heads=adaptive asks for the same head budgets as the prefix.
  if (!out.adaptive && find_option(m, "heads") != nullptr &&
      out.method.get_string("heads") == "adaptive") {
    out.adaptive = true;
    out.alpha = out.method.get_float("safeguard");
    out.by_option = true;
  }
  return out;
}

namespace {

// RoPE on adjacent pairs, theta 10000 (the engine's rotation): row r is token r % S.
void rope_rows(float* x, int64_t rows, int64_t S, int64_t D, int64_t pos0) {
  for (int64_t r = 0; r < rows; ++r) {
    const double p = static_cast<double>(pos0 + r % S);
    float* v = x + r * D;
    for (int64_t i = 0; i < D / 2; ++i) {
      const double a =
          p * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(D));
      const auto c = static_cast<float>(std::cos(a)), s = static_cast<float>(std::sin(a));
      const float v0 = v[2 * i], v1 = v[2 * i + 1];
      v[2 * i] = v0 * c - v1 * s;
      v[2 * i + 1] = v0 * s + v1 * c;
    }
  }
}

}  // namespace

std::vector<std::vector<int64_t>> choose_one_shot(const OneShotScorer& scorer, double ratio,
                                                  bool adaptive, double alpha, const Tensor& keys,
                                                  const Tensor& values, const Tensor* queries,
                                                  int64_t pos0, int64_t layer, uint64_t seed,
                                                  bool pre_rope) {
  const int64_t B = keys.B(), H = keys.H(), S = keys.S(), D = keys.D();
  std::vector<std::vector<int64_t>> keep(static_cast<size_t>(B * H));
  std::vector<double> scores(static_cast<size_t>(H * S));
  const int64_t n_keep = one_shot_keep(S, ratio);
  std::vector<float> rotated;
  for (int64_t b = 0; b < B; ++b) {
    OneShotInput in;
    in.H = H;
    in.S = S;
    in.D = D;
    in.K = keys.head(b, 0);
    in.V = values.head(b, 0);
    in.pos0 = pos0;
    in.layer = layer;
    in.seed = seed;
    if (queries) {
      in.Hq = queries->H();
      in.Q = queries->head(b, 0);
    }
    if (pre_rope) {  // the codec stores un-rotated keys; scorers see rotated ones
      rotated.assign(in.K, in.K + H * S * D);
      rope_rows(rotated.data(), H * S, S, D, in.pos0);
      in.K = rotated.data();
    }
    scorer.score(in, scores.data());
    auto k = adaptive ? keep_top_adaptive(scores.data(), H, S, n_keep, alpha)
                      : keep_top(scores.data(), H, S, n_keep);
    for (int64_t h = 0; h < H; ++h) keep[static_cast<size_t>(b * H + h)] = std::move(k[h]);
  }
  return keep;
}

namespace {

class OneShotCache final : public EvictionCache {
 public:
  OneShotCache(const OneShotSpec& spec, double ratio, CacheContext ctx)
      : EvictionCache(spec.method, std::move(ctx), 0, 0),
        scorer_(find_method(spec.method.method()).make_scorer(spec.method)),
        ratio_(ratio),
        adaptive_(spec.adaptive),
        alpha_(spec.alpha) {
    one_shot_keep(1, ratio);  // validates the ratio now
  }

 protected:
  void do_update(const Tensor& keys, const Tensor& values, const Tensor* queries) override {
    if (!compressed_ && keys.S() > 1) {
      keep_ = choose_one_shot(*scorer_, ratio_, adaptive_, alpha_, keys, values, queries, offset(),
                              context().layer, context().seed, wants_pre_rope_keys());
      compressed_ = true;
    }
    EvictionCache::do_update(keys, values, queries);
    std::vector<std::vector<int64_t>>().swap(keep_);
  }

  void process_head(HeadState& st, const float* K, const float* V, const std::vector<QueryRows>&,
                    int64_t S, int64_t pos0) override {
    const int64_t D = head_dim();
    if (!keep_.empty()) {
      for (int64_t s : keep_[st.index]) append(st, K + s * D, V + s * D, pos0 + s, 0.0);
      return;
    }
    for (int64_t s = 0; s < S; ++s) append(st, K + s * D, V + s * D, pos0 + s, 0.0);
  }

  bool keeps_scores() const override { return false; }

 private:
  int64_t policy_bytes() const override {
    int64_t b = buffer_bytes(keep_);
    for (const auto& k : keep_) b += buffer_bytes(k);
    return b;
  }

  std::unique_ptr<OneShotScorer> scorer_;
  double ratio_;
  bool adaptive_;
  double alpha_;
  bool compressed_ = false;
  std::vector<std::vector<int64_t>> keep_;  // during the context update only
};

}  // namespace

std::unique_ptr<KVCache> make_one_shot_cache(const OneShotSpec& spec, double ratio,
                                             int64_t head_dim, int64_t layer, int64_t n_layers,
                                             uint64_t seed, bool keep_policy) {
  VQ_CHECK(layer >= 0 && layer < n_layers, InvalidArgument, "make_one_shot_cache: layer = ", layer,
           " is outside [0, n_layers = ", n_layers, ")");
  CacheContext ctx{head_dim, layer, n_layers, seed, {}};
  if (spec.method.codec() != nullptr) ctx.codec = *spec.method.codec();
  if (!keep_policy) return std::make_unique<OneShotCache>(spec, ratio, std::move(ctx));
  const MethodInfo& m = find_method(spec.method.method());
  auto cache = m.make_cache(spec.method, ctx);
  auto* ev = dynamic_cast<EvictionCache*>(cache.get());
  VQ_CHECK(ev != nullptr, InvalidArgument, "method '", m.id,
           "' has no decode-time eviction policy to keep on after the one-shot compression");
  ev->compress_first_context(m.make_scorer(spec.method), ratio, spec.adaptive, spec.alpha);
  return cache;
}

}  // namespace vq::eviction

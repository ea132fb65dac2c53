// Helpers for the eviction family's property tests: kept positions, chunked feeding, and a plain
// double-precision reference for "append, and while over budget evict the lowest score" rules.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "veloxquant/cache.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/tensor.hpp"

namespace famtest {

/// Ids of the methods with one-shot scoring (MethodInfo::make_scorer), in registry order.
inline std::vector<std::string> scored_ids() {
  std::vector<std::string> ids;
  for (const auto& m : vq::methods())
    if (m.make_scorer) ids.push_back(m.id);
  return ids;
}

/// Kept positions of head (b, h), ascending.
inline std::vector<int64_t> kept(const vq::KVCache& c, int64_t b = 0, int64_t h = 0) {
  const int64_t* pos = c.positions(b, h);
  std::vector<int64_t> p(pos, pos + c.kept(b, h));
  std::sort(p.begin(), p.end());
  return p;
}

/// Feeds tokens [0, S) in consecutive chunks whose sizes cycle through `chunks`.
inline void feed(vq::KVCache& c, const vq::Tensor& K, const vq::Tensor& V, const vq::Tensor* Q,
                 const std::vector<int64_t>& chunks) {
  int64_t s = 0;
  for (size_t i = 0; s < K.S(); ++i) {
    const int64_t n = std::min(chunks[i % chunks.size()], K.S() - s);
    if (Q) {
      vq::Tensor q = Q->slice_tokens(s, n);
      c.update(K.slice_tokens(s, n), V.slice_tokens(s, n), &q);
    } else {
      c.update(K.slice_tokens(s, n), V.slice_tokens(s, n));
    }
    s += n;
  }
}

using Vec = std::vector<double>;

inline Vec row(const vq::Tensor& t, int64_t b, int64_t h, int64_t s) {
  Vec r(static_cast<size_t>(t.D()));
  for (int64_t d = 0; d < t.D(); ++d) r[static_cast<size_t>(d)] = t.at(b, h, s, d);
  return r;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

/// softmax of x; entries equal to -inf get 0.
inline Vec softmax(Vec x) {
  double mx = -std::numeric_limits<double>::infinity();
  for (double v : x) mx = std::max(mx, v);
  double z = 0;
  for (double& v : x) {
    v = std::isinf(v) && v < 0 ? 0.0 : std::exp(v - mx);
    z += v;
  }
  for (double& v : x) v /= z;
  return x;
}

/// The probe rows of token s for KV head h: the G query rows (Q given) or the key.
inline std::vector<Vec> probe_rows(const vq::Tensor& K, const vq::Tensor* Q, int64_t b, int64_t h,
                                   int64_t s) {
  std::vector<Vec> rows;
  if (Q) {
    const int64_t G = Q->H() / K.H();
    for (int64_t g = 0; g < G; ++g) rows.push_back(row(*Q, b, h * G + g, s));
  } else {
    rows.push_back(row(K, b, h, s));
  }
  return rows;
}

/// Mean over the probe rows of the causal softmax over `held` (positions <= max_pos visible).
inline Vec probe_attention(const vq::Tensor& K, int64_t b, int64_t h,
                           const std::vector<int64_t>& held, const std::vector<Vec>& probes,
                           int64_t max_pos) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(K.D()));
  Vec out(held.size(), 0.0);
  for (const Vec& q : probes) {
    Vec l(held.size());
    bool any = false;
    for (size_t j = 0; j < held.size(); ++j) {
      if (held[j] > max_pos) {
        l[j] = -std::numeric_limits<double>::infinity();
      } else {
        l[j] = dot(row(K, b, h, held[j]), q) * scale;
        any = true;
      }
    }
    if (!any) continue;
    const Vec p = softmax(l);
    for (size_t j = 0; j < held.size(); ++j) out[j] += p[j];
  }
  for (double& v : out) v /= static_cast<double>(probes.size());
  return out;
}

/// Index in `held` of the lowest (score, position) among positions >= n_sink; -1 if none.
inline int64_t lowest(const std::vector<int64_t>& held, const Vec& score, int64_t n_sink) {
  int64_t best = -1;
  for (size_t j = 0; j < held.size(); ++j) {
    if (held[j] < n_sink) continue;
    if (best < 0 || score[j] < score[static_cast<size_t>(best)] ||
        (score[j] == score[static_cast<size_t>(best)] && held[j] < held[static_cast<size_t>(best)]))
      best = static_cast<int64_t>(j);
  }
  return best;
}

/// Reference of a one-eviction-per-token rule on head (b, h) over tokens [0, S): each token is
/// appended; when the head then holds more than `budget`, score(held, t) gives one score per held
/// position and the lowest non-sink leaves. Returns the kept positions, ascending.
inline std::vector<int64_t> simulate(
    int64_t S, int64_t budget, int64_t n_sink,
    const std::function<Vec(const std::vector<int64_t>&, int64_t)>& score) {
  std::vector<int64_t> held;
  for (int64_t t = 0; t < S; ++t) {
    held.push_back(t);
    if (static_cast<int64_t>(held.size()) <= budget) continue;
    const Vec s = score(held, t);
    const int64_t j = lowest(held, s, n_sink);
    if (j >= 0) held.erase(held.begin() + j);
  }
  std::sort(held.begin(), held.end());
  return held;
}

}  // namespace famtest

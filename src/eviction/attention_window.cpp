#include "eviction/attention_window.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace vq::eviction {

void ProbeRing::reset(int64_t window, int64_t D) {
  W_ = std::max<int64_t>(window, 1);
  D_ = D;
  gcap_ = 1;
  start_ = 0;
  count_ = 0;
  data_.assign(static_cast<size_t>(W_ * D_), 0.0f);
  pos_.assign(static_cast<size_t>(W_), 0);
  rows_.assign(static_cast<size_t>(W_), 0);
}

void ProbeRing::grow_rows(int64_t g) {
  // Rare (the first probe with more query rows than before): re-lay every entry at stride g.
  std::vector<float> wider(static_cast<size_t>(W_ * g * D_), 0.0f);
  for (int64_t s = 0; s < W_; ++s)
    std::memcpy(wider.data() + s * g * D_, data_.data() + s * gcap_ * D_,
                sizeof(float) * static_cast<size_t>(gcap_ * D_));
  data_.swap(wider);
  gcap_ = g;
}

void ProbeRing::push(int64_t pos, const float* key, const QueryRows& q, bool use_queries) {
  const int64_t G = (use_queries && q.G > 0) ? q.G : 1;
  if (G > gcap_) grow_rows(G);
  size_t s;
  if (count_ < W_) {
    s = slot(count_);
    ++count_;
  } else {
    s = slot(0);
    start_ = (start_ + 1) % W_;
  }
  pos_[s] = pos;
  rows_[s] = G;
  float* dst = data_.data() + static_cast<int64_t>(s) * gcap_ * D_;
  const size_t bytes = sizeof(float) * static_cast<size_t>(D_);
  if (use_queries && q.G > 0) {
    for (int64_t g = 0; g < G; ++g) std::memcpy(dst + g * D_, q.row(g), bytes);
  } else {
    std::memcpy(dst, key, bytes);
  }
}

namespace {

// x[i] = exp(x[i] - mx) for i < n, every element through the same (vectorized) kernel. Eigen's
// packet exp and its scalar fallback can differ in the last bit, and which elements of a Map
// take the scalar path depends on the buffer's address and on n. So the values go through an
// Eigen-owned (aligned) buffer padded to a whole number of packets, with -inf in the padding:
// equal inputs give equal outputs wherever they sit, and ties stay ties.
template <typename T>
void exp_shifted(T* x, int64_t n, T mx) {
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  thread_local Vec buf;
  const int64_t padded = (n + 15) / 16 * 16;  // a multiple of every packet size (<= 64 bytes)
  if (buf.size() < padded) buf.resize(padded);
  Eigen::Map<Vec, Eigen::AlignedMax> b(buf.data(), padded);
  b.head(n) = Eigen::Map<const Vec>(x, n);
  b.tail(padded - n).setConstant(-std::numeric_limits<T>::infinity());
  b = (b.array() - mx).exp();
  Eigen::Map<Vec>(x, n) = b.head(n);
}

}  // namespace

double sum_fixed(const float* x, int64_t n) {
  double p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) p[j] += static_cast<double>(x[i + j]);
  double t = 0;
  for (; i < n; ++i) t += static_cast<double>(x[i]);
  return ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7])) + t;
}

void exp_shifted_f(float* x, int64_t n, float mx) {
  exp_shifted(x, n, mx);
}

void causal_softmax(const store::RowSource& K, int64_t n, const int64_t* pos, int64_t max_pos,
                    const float* q, float scale, double* out, float* prod) {
  if (n <= 0) return;
  // Logits and exponentials in float (Eigen's float exp is twice as wide as its double one),
  // the normaliser summed in double in a fixed order.
  row_dots(K, n, q, prod);
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    prod[i] = pos != nullptr && pos[i] > max_pos ? -std::numeric_limits<float>::infinity()
                                                 : prod[i] * scale;
    mx = std::max(mx, prod[i]);
  }
  Eigen::Map<Eigen::VectorXd> o(out, n);
  if (mx == -std::numeric_limits<float>::infinity()) {  // every row masked
    o.setZero();
    return;
  }
  normalize_exp(prod, n, mx, out);
}

void normalize_exp(float* x, int64_t n, float mx, double* out) {
  exp_shifted(x, n, mx);
  const double inv = 1.0 / sum_fixed(x, n);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(x[i]) * inv;
}

namespace {

// acc[0:n] = mean over the G rows (row g at rows + g * stride) of causal_softmax.
void probe_mean(const store::RowSource& K, int64_t n, const int64_t* pos, int64_t max_pos,
                const float* rows, int64_t G, int64_t stride, AttnScratch& s) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(K.dim()));
  Eigen::Map<Eigen::VectorXd> t(s.tmp.data(), n), a(s.acc.data(), n);
  a.setZero();
  for (int64_t g = 0; g < G; ++g) {
    causal_softmax(K, n, pos, max_pos, rows + g * stride, scale, s.tmp.data(), s.prod.data());
    a += t;
  }
  a /= static_cast<double>(G);
}

}  // namespace

void step_attention(const store::RowSource& K, int64_t n, const float* k, const QueryRows& q,
                    bool use_queries, AttnScratch& s) {
  if (n <= 0) return;
  s.ensure(n);
  if (use_queries && q.G > 0)
    probe_mean(K, n, nullptr, 0, q.base, q.G, q.stride, s);
  else
    probe_mean(K, n, nullptr, 0, k, 1, 0, s);
  Eigen::Map<Eigen::VectorXd> o(s.out.data(), n);
  o.setZero();
  o += Eigen::Map<const Eigen::VectorXd>(s.acc.data(), n);
}

void window_attention(const store::RowSource& K, int64_t n, const int64_t* pos,
                      const ProbeRing& ring, Fusion fusion, AttnScratch& s, int64_t first) {
  if (n <= 0) return;
  s.ensure(n);
  Eigen::Map<Eigen::VectorXd> o(s.out.data(), n);
  const Eigen::Map<const Eigen::VectorXd> a(s.acc.data(), n);
  o.setZero();
  if (ring.size() - first == 1) {
    probe_mean(K, n, pos, ring.pos(first), ring.row(first, 0), ring.rows(first), K.dim(), s);
    o += a;
    return;
  }
  // Several probes: each live probe row's logits by the store's dot kernel (the kernel every
  // single-probe path uses, so a logit never depends on how many probes there are), then a
  // causal softmax per row.
  const int64_t R = ring.row_capacity(), D = K.dim();
  if (s.logits.rows() < R || s.logits.cols() < n)
    s.logits.resize(std::max<int64_t>(R, s.logits.rows()), std::max<int64_t>(n, s.logits.cols()));
  for (int64_t w = first; w < ring.size(); ++w)
    for (int64_t g = 0; g < ring.rows(w); ++g)
      row_dots(K, n, ring.row(w, g), s.logits.row(ring.row_index(w, g)).data());
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Only rows newer than the oldest probe can be hidden from some probe: list them once.
  s.hidden.clear();
  for (int64_t i = 0; i < n; ++i)
    if (pos[i] > ring.pos(first)) s.hidden.push_back(i);
  // Per-row softmax in float (Eigen's float exp is several times faster than its double one);
  // the mean over the query rows and the fusion stay in double.
  Eigen::Map<Eigen::VectorXf> t(s.prod.data(), n);
  Eigen::Map<Eigen::VectorXd> acc(s.acc.data(), n);
  for (int64_t w = first; w < ring.size(); ++w) {
    const int64_t G = ring.rows(w), p = ring.pos(w);
    acc.setZero();
    for (int64_t g = 0; g < G; ++g) {
      t = Eigen::Map<const Eigen::VectorXf>(s.logits.row(ring.row_index(w, g)).data(), n) * scale;
      for (const int64_t i : s.hidden)
        if (pos[i] > p) t[i] = -std::numeric_limits<float>::infinity();
      const float mx = t.maxCoeff();
      if (mx == -std::numeric_limits<float>::infinity()) continue;  // sees nothing kept
      exp_shifted(s.prod.data(), n, mx);
      acc += t.cast<double>() * (1.0 / sum_fixed(s.prod.data(), n));
    }
    acc /= static_cast<double>(G);
    if (fusion == Fusion::Sum || w == first)
      o += acc;
    else
      o = o.cwiseMax(acc);
  }
}

void lowest_evictable(const double* score, const int64_t* pos, int64_t T, int64_t n_sink, int64_t m,
                      std::vector<int64_t>& order, std::vector<int64_t>& victims) {
  order.clear();
  victims.clear();
  for (int64_t t = 0; t < T; ++t)
    if (pos[t] >= n_sink) order.push_back(t);
  if (m <= 0 || order.empty()) return;
  const auto less = [&](int64_t x, int64_t y) {
    return score[x] < score[y] || (score[x] == score[y] && pos[x] < pos[y]);
  };
  if (m < static_cast<int64_t>(order.size())) {
    std::nth_element(order.begin(), order.begin() + m, order.end(), less);
    order.resize(static_cast<size_t>(m));
  }
  std::sort(order.begin(), order.end(), less);
  victims.assign(order.begin(), order.end());
}

int64_t ChunkScoringCache::gather(const HeadState& st, const float* K, int64_t S, int64_t pos0) {
  const int64_t T = st.n + S;
  Chunk& c = chunk();
  c.chunk_rows = std::make_unique<store::Fp32Rows>(K, S, head_dim());
  c.all_K = std::make_unique<store::ConcatRows>(keys(st), *c.chunk_rows);
  c.all_pos.resize(static_cast<size_t>(T));
  for (int64_t t = 0; t < st.n; ++t) c.all_pos[static_cast<size_t>(t)] = st.kv.position(t);
  for (int64_t s = 0; s < S; ++s) c.all_pos[static_cast<size_t>(st.n + s)] = pos0 + s;
  return T;
}

void ChunkScoringCache::mark_victims(int64_t T) {
  Chunk& c = chunk();
  c.drop.assign(static_cast<size_t>(T), 0);
  for (const int64_t v : c.victims) c.drop[static_cast<size_t>(v)] = 1;
}

void ChunkScoringCache::commit(HeadState& st, const float* K, const float* V, int64_t S,
                               int64_t pos0, const double* score) {
  const int64_t D = head_dim();
  const int64_t n0 = st.n;
  Chunk& c = chunk();
  c.all_K.reset();  // views of this head's rows and the caller's chunk: not kept past the round
  c.chunk_rows.reset();
  const std::vector<char>& drop = c.drop;
  for (int64_t t = 0; t < n0; ++t)
    if (!drop[static_cast<size_t>(t)]) st.score[static_cast<size_t>(t)] = score[t];
  // Highest slot first: the row that moves into a freed slot is always one that stays.
  for (int64_t t = n0 - 1; t >= 0; --t)
    if (drop[static_cast<size_t>(t)]) remove_slot(st, t);
  for (int64_t s = 0; s < S; ++s)
    if (!drop[static_cast<size_t>(n0 + s)])
      append(st, K + s * D, V + s * D, pos0 + s, score[n0 + s]);
}

}  // namespace vq::eviction

#include "eviction/eviction_cache.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "veloxquant/errors.hpp"

namespace vq::eviction {

EvictionCache::EvictionCache(CacheConfig config, CacheContext ctx, int64_t budget, int64_t n_sink)
    : KVCache(std::move(config), ctx), budget_(budget), n_sink_(n_sink) {
  VQ_CHECK(budget_ >= 0, InvalidArgument, this->config().method(), ": budget = ", budget_,
           " must be >= 0");
}

struct EvictionCache::MatrixRows final : store::RowSource {
  const HeadState* st = nullptr;
  bool values = false;
  int64_t rows() const override { return st->n; }
  int64_t dim() const override { return st->K.cols(); }
  void read(int64_t first, int64_t n, float* out) const override {
    const RowMatF& M = values ? st->V : st->K;
    std::memcpy(out, M.row(first).data(), sizeof(float) * static_cast<size_t>(n * M.cols()));
  }
};

const store::RowSource& EvictionCache::keys(const HeadState& st) const {
  return *sources_[2 * head_index(st)];
}
const store::RowSource& EvictionCache::values(const HeadState& st) const {
  return *sources_[2 * head_index(st) + 1];
}

void EvictionCache::on_shape_known(int64_t B, int64_t H) {
  heads_.assign(static_cast<size_t>(B * H), HeadState{});
  sources_.clear();
  for (auto& st : heads_)
    for (int kv = 0; kv < 2; ++kv) {
      auto src = std::make_unique<MatrixRows>();
      src->st = &st;
      src->values = kv == 1;
      sources_.push_back(std::move(src));
    }
  const int64_t cap = budget_ > 0 ? budget_ + 1 : 16;
  for (auto& st : heads_) ensure_capacity(st, cap);
}

void EvictionCache::ensure_capacity(HeadState& st, int64_t rows) {
  if (st.K.rows() >= rows) return;
  int64_t cap = std::max<int64_t>(rows, st.K.rows() * 2);
  const int64_t D = head_dim();
  st.K.conservativeResize(cap, D);
  st.V.conservativeResize(cap, D);
  st.pos.resize(static_cast<size_t>(cap));
  st.score.resize(static_cast<size_t>(cap));
  st.aux.resize(static_cast<size_t>(cap));
}

void EvictionCache::refresh_view(size_t idx) {
  HeadState& st = heads_[idx];
  view_.heads[idx] = HeadView{st.K.data(), st.V.data(), st.pos.data(), st.n};
}

void EvictionCache::do_update(const Tensor& keys, const Tensor& values, const Tensor* queries) {
  const int64_t S = keys.S();
  const int64_t G = queries ? queries->H() / keys.H() : 0;
  qrows_.resize(static_cast<size_t>(S));
  for (int64_t b = 0; b < keys.B(); ++b) {
    for (int64_t h = 0; h < keys.H(); ++h) {
      for (int64_t s = 0; s < S; ++s) {
        qrows_[static_cast<size_t>(s)] =
            queries ? QueryRows{queries->row(b, h * G, s), G, queries->S() * queries->D()}
                    : QueryRows{};
      }
      const size_t idx = static_cast<size_t>(b * keys.H() + h);
      process_head(heads_[idx], keys.head(b, h), values.head(b, h), qrows_, S, offset());
      refresh_view(idx);
    }
  }
}

void EvictionCache::process_head(HeadState& st, const float* K, const float* V,
                                 const std::vector<QueryRows>& q, int64_t S, int64_t pos0) {
  const int64_t D = head_dim();
  for (int64_t s = 0; s < S; ++s)
    on_token(st, K + s * D, V + s * D, q[static_cast<size_t>(s)], pos0 + s);
}

int64_t EvictionCache::append(HeadState& st, const float* k, const float* v, int64_t pos,
                              double score, double aux) {
  ensure_capacity(st, st.n + 1);
  const int64_t D = head_dim();
  const int64_t slot = st.n++;
  std::memcpy(st.K.row(slot).data(), k, sizeof(float) * static_cast<size_t>(D));
  std::memcpy(st.V.row(slot).data(), v, sizeof(float) * static_cast<size_t>(D));
  st.pos[static_cast<size_t>(slot)] = pos;
  st.score[static_cast<size_t>(slot)] = score;
  st.aux[static_cast<size_t>(slot)] = aux;
  return slot;
}

void EvictionCache::remove_slot(HeadState& st, int64_t slot) {
  const int64_t last = st.n - 1;
  if (slot != last) {
    st.K.row(slot) = st.K.row(last);
    st.V.row(slot) = st.V.row(last);
    st.pos[static_cast<size_t>(slot)] = st.pos[static_cast<size_t>(last)];
    st.score[static_cast<size_t>(slot)] = st.score[static_cast<size_t>(last)];
    st.aux[static_cast<size_t>(slot)] = st.aux[static_cast<size_t>(last)];
  }
  st.n = last;
}

namespace {
// Scratch buffers owned by Eigen (aligned), so that vectorized reductions never depend on where
// the caller's memory happens to sit: results are bit-identical whatever the input alignment.
thread_local Eigen::VectorXf t_query;
thread_local Eigen::VectorXd t_logits, t_acc;

template <typename Vec>
auto& grow(Vec& v, int64_t n) {
  if (v.size() < n) v.resize(std::max<int64_t>(n, 2 * v.size()));
  return v;
}

// softmax((K[0:n] q) * scale) into out (an aligned Eigen buffer of >= n).
void softmax_into(const RowMatF& K, int64_t n, const float* q, float scale, Eigen::VectorXd& out) {
  const int64_t D = K.cols();
  grow(t_query, D).head(D) = Eigen::Map<const Eigen::VectorXf>(q, D);
  auto o = grow(out, n).head(n);
  o.noalias() = (K.topRows(n) * t_query.head(D)).cast<double>();
  o *= static_cast<double>(scale);
  const double mx = o.maxCoeff();
  o = (o.array() - mx).exp();
  o /= o.sum();
}
}  // namespace

void softmax_logits(const RowMatF& K, int64_t n, const float* q, float scale, double* out) {
  if (n <= 0) return;
  softmax_into(K, n, q, scale, t_logits);
  Eigen::Map<Eigen::VectorXd>(out, n) = t_logits.head(n);
}

void driving_attention(const RowMatF& K, int64_t n, const float* k, const QueryRows& q,
                       bool use_queries, double* out, double* tmp) {
  (void)tmp;
  if (n <= 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(K.cols()));
  if (!use_queries || q.G == 0) {
    softmax_logits(K, n, k, scale, out);
    return;
  }
  auto acc = grow(t_acc, n).head(n);
  acc.setZero();
  for (int64_t g = 0; g < q.G; ++g) {
    softmax_into(K, n, q.row(g), scale, t_logits);
    acc += t_logits.head(n);
  }
  acc /= static_cast<double>(q.G);
  Eigen::Map<Eigen::VectorXd>(out, n) = acc;
}

}  // namespace vq::eviction

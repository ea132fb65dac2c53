#include "eviction/eviction_cache.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>

#include "core/thread_pool.hpp"
#include "eviction/attention_window.hpp"
#include "eviction/one_shot.hpp"
#include "store/buffers.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"

namespace vq::eviction {

using store::cap_bytes;
using store::grow_to;
using store::maybe_shrink;

EvictionCache::EvictionCache(CacheConfig config, CacheContext ctx, int64_t budget, int64_t n_sink)
    : KVCache(std::move(config), ctx), budget_(budget), n_sink_(n_sink) {
  VQ_CHECK(budget_ >= 0, InvalidArgument, this->config().method(), ": budget = ", budget_,
           " must be >= 0");
  const MethodInfo& self = find_method(this->config().method());
  if (find_option(self, "heads") != nullptr)
    set_adaptive_heads(this->config().get_string("heads") == "adaptive",
                       this->config().get_float("safeguard"));
  const CacheConfig& codec = context().codec;
  if (!codec.method().empty()) {
    const MethodInfo& m = find_method(codec.method());
    VQ_CHECK(m.make_row_codec != nullptr, InvalidArgument, this->config().method(), ": '",
             codec.method(), "' is not a codec; kept rows can be stored through a codec method");
    // Build head 0's codecs once now (KV head count still unknown): a bad codec configuration
    // (a calibration for another model, a head_dim the format refuses) fails here, at
    // construction, and the codec says what attention must know.
    for (int kv = 0; kv < 2; ++kv) {
      auto probe = m.make_row_codec(
          codec, store::StreamInfo{head_dim(), context().layer, 0, 0, kv, context().seed});
      if (kv == 0) {
        pre_rope_ = probe->wants_pre_rope();
        quant_q_ = probe->quantizes_queries();
        q_block_ = probe->query_block();
      }
      const store::RowCodec::ValueRange r = probe->value_range();
      if (kv == 0 || r.max_abs < range_.max_abs) range_ = {r.max_abs, r.what};
    }
  }
}

EvictionCache::~EvictionCache() = default;

void EvictionCache::set_adaptive_heads(bool on, double safeguard) {
  VQ_CHECK(safeguard >= 0.0 && safeguard <= 1.0, InvalidArgument, config().method(),
           ": safeguard = ", safeguard, " is outside [0, 1]");
  adaptive_ = on;
  safeguard_ = safeguard;
}

void EvictionCache::compress_first_context(std::unique_ptr<OneShotScorer> scorer, double ratio,
                                           bool adaptive, double safeguard) {
  one_shot_keep(1, ratio);  // validates the ratio
  VQ_CHECK(scorer != nullptr, InvalidArgument, config().method(), ": no one-shot scorer");
  VQ_CHECK(offset() == 0, InvalidArgument, config().method(), ": compress_first_context after ",
           offset(), " tokens (must precede the context)");
  one_shot_ = std::move(scorer);
  one_shot_ratio_ = ratio;
  one_shot_adaptive_ = adaptive;
  one_shot_safeguard_ = safeguard;
}

void EvictionCache::on_shape_known(int64_t B, int64_t H) {
  heads_.clear();
  heads_.resize(static_cast<size_t>(B * H));
  const int64_t D = head_dim();
  const CacheConfig& codec = context().codec;
  const MethodInfo* m = codec.method().empty() ? nullptr : &find_method(codec.method());
  for (int64_t i = 0; i < B * H; ++i) {
    std::unique_ptr<store::RowCodec> c[2];
    for (int kv = 0; kv < 2; ++kv) {
      const store::StreamInfo info{D, context().layer, i % H, H, kv, context().seed};
      c[kv] = m ? m->make_row_codec(codec, info) : std::make_unique<store::Fp16Codec>(D);
    }
    HeadState& st = heads_[static_cast<size_t>(i)];
    st.kv = store::HeadStore(std::move(c[0]), std::move(c[1]));
    st.index = static_cast<size_t>(i);
  }
}

const store::RowSource& EvictionCache::keys(int64_t b, int64_t h) const {
  check_head(b, h);
  return heads_[static_cast<size_t>(b * kv_heads() + h)].kv.keys();
}
const store::RowSource& EvictionCache::values(int64_t b, int64_t h) const {
  check_head(b, h);
  return heads_[static_cast<size_t>(b * kv_heads() + h)].kv.values();
}
const int64_t* EvictionCache::positions(int64_t b, int64_t h) const {
  check_head(b, h);
  return heads_[static_cast<size_t>(b * kv_heads() + h)].kv.positions();
}
int64_t EvictionCache::kept(int64_t b, int64_t h) const {
  if (heads_.empty()) return 0;
  check_head(b, h);
  return heads_[static_cast<size_t>(b * kv_heads() + h)].n;
}

void EvictionCache::round_as_stored(int kv, int64_t h, float* rows, int64_t n, int64_t stride) {
  VQ_CHECK(kv == 0 || kv == 1, InvalidArgument, "round_as_stored: kv = ", kv, " must be 0 or 1");
  if (!heads_.empty()) {
    check_head(0, h);
    heads_[static_cast<size_t>(h)].kv.round_trip(kv, rows, n, stride);
    return;
  }
  const CacheConfig& codec = context().codec;
  if (codec.method().empty()) {  // fp16 rows
    store::Fp16Codec c(head_dim());
    store::round_trip_rows(c, rows, n, stride);
    return;
  }
  auto c = find_method(codec.method())
               .make_row_codec(
                   codec, store::StreamInfo{head_dim(), context().layer, h, 0, kv, context().seed});
  store::round_trip_rows(*c, rows, n, stride);
}

bool EvictionCache::wants_pre_rope_keys() const {
  return pre_rope_;
}

bool EvictionCache::quantizes_queries(int64_t* block) const {
  if (block) *block = q_block_;
  return quant_q_;
}

void EvictionCache::run_heads(const Tensor& keys, const Tensor& values, const Tensor* queries,
                              int64_t i0, int64_t i1) {
  const int64_t S = keys.S(), H = keys.H();
  const int64_t G = queries ? queries->H() / H : 0;
  std::vector<QueryRows>& qrows = qrows_->rows;
  qrows.resize(static_cast<size_t>(S));
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t b = i / H, h = i % H;
    for (int64_t s = 0; s < S; ++s) {
      qrows[static_cast<size_t>(s)] =
          queries ? QueryRows{queries->row(b, h * G, s), G, queries->S() * queries->D()}
                  : QueryRows{};
    }
    HeadState& st = heads_[static_cast<size_t>(i)];
    process_head(st, keys.head(b, h), values.head(b, h), qrows, S, offset());
    st.kv.settle();
  }
  if (qrows.capacity() > 64) std::vector<QueryRows>().swap(qrows);  // a prefill's, not kept
}

void EvictionCache::do_update(const Tensor& keys, const Tensor& values, const Tensor* queries) {
  if (one_shot_ && keys.S() > 1) {
    compress_context(keys, values, queries);
    return;
  }
  // Heads are independent (each owns its store, scores and per-head method state; scratch is
  // per thread), so they run as pieces of one loop: the same bytes for any thread count. A
  // piece holds at least about min_piece_macs() of work, estimated as twice the multiply-adds of
  // the attention the update drives (S rows against the held ones, over the query group): the
  // policies' softmax in double and their exponentials cost about as much again (bench speed's
  // layer rows: h2o, tova and morphkv at n = 512, D = 64). Small heads run together.
  ThreadPool& pool = global_pool();
  const int64_t S = keys.S(), H = keys.H(), D = head_dim();
  const int64_t G = queries ? std::max<int64_t>(1, queries->H() / H) : 1;
  const int64_t held = heads_.empty() ? 0 : heads_[0].n;
  const int64_t grain = grain_for(2 * S * (held + S) * D * G);
  auto heads = [&](int64_t i0, int64_t i1) { run_heads(keys, values, queries, i0, i1); };
  if (!adaptive_) {
    pool.parallel_for(keys.B() * H, grain, heads);
    return;
  }
  // Head-adaptive budgets: a batch row's heads, then its budgets for the next token.
  for (int64_t b = 0; b < keys.B(); ++b) {
    pool.parallel_for(H, grain, [&](int64_t h0, int64_t h1) { heads(b * H + h0, b * H + h1); });
    redistribute(b);
  }
}

void EvictionCache::compress_context(const Tensor& keys, const Tensor& values,
                                     const Tensor* queries) {
  const auto keep = choose_one_shot(*one_shot_, one_shot_ratio_, one_shot_adaptive_,
                                    one_shot_safeguard_, keys, values, queries, offset(),
                                    context().layer, context().seed, wants_pre_rope_keys());
  one_shot_.reset();
  // The compressed size becomes the budget the decode-time policy holds the cache to.
  budget_ = one_shot_keep(keys.S(), one_shot_ratio_);
  if (one_shot_adaptive_) set_adaptive_heads(true, one_shot_safeguard_);
  const int64_t H = keys.H(), D = head_dim();
  const int64_t G = queries ? queries->H() / H : 0;
  std::vector<QueryRows> q1(1);
  for (int64_t b = 0; b < keys.B(); ++b) {
    for (int64_t h = 0; h < H; ++h) {
      HeadState& st = heads_[static_cast<size_t>(b * H + h)];
      const auto& rows = keep[static_cast<size_t>(b * H + h)];
      st.budget = static_cast<int64_t>(rows.size());
      // Each kept row enters through the method's own token handler (its per-token state is
      // built as if it had seen only the kept context); no row is evicted at this size.
      for (int64_t s : rows) {
        q1[0] = queries ? QueryRows{queries->row(b, h * G, s), G, queries->S() * queries->D()}
                        : QueryRows{};
        process_head(st, keys.head(b, h) + s * D, values.head(b, h) + s * D, q1, 1, offset() + s);
      }
      st.kv.settle();
    }
    if (adaptive_) redistribute(b);
  }
}

void EvictionCache::redistribute(int64_t b) {
  const int64_t H = kv_heads();
  if (budget_ <= 0 || !keeps_scores()) return;
  const int64_t total = H * budget_;
  const auto n_safe =
      std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(budget_) * safeguard_));
  HeadState* hs = heads_.data() + b * H;
  int64_t held = 0;
  for (int64_t h = 0; h < H; ++h) held += hs[h].n;
  // The next token adds one row to every head: budgets sum to the layer's H * budget.
  const int64_t excess = held + H - total;
  if (excess <= 0) {
    const int64_t spare = -excess;
    for (int64_t h = 0; h < H; ++h)
      hs[h].budget = hs[h].n + 1 + spare / H + (h < spare % H ? 1 : 0);
    return;
  }
  // The layer's `excess` lowest rows outside each head's n_safe best and its newest row are
  // the next evictions; each head's budget is what remains of it after the next token.
  rank_.clear();
  for (int64_t h = 0; h < H; ++h) {
    const HeadState& st = hs[h];
    rank_order_.resize(static_cast<size_t>(st.n));
    std::iota(rank_order_.begin(), rank_order_.end(), int64_t{0});
    auto r = [&](int64_t i) {
      const double v = retention(st, i);
      return std::isnan(v) ? -std::numeric_limits<double>::infinity() : v;
    };
    const int64_t m = std::min(n_safe, st.n);
    std::nth_element(rank_order_.begin(), rank_order_.begin() + m, rank_order_.end(),
                     [&](int64_t a, int64_t c) {
                       const double x = r(a), y = r(c);
                       return x != y ? x > y : st.kv.position(a) > st.kv.position(c);
                     });
    int64_t newest = -1;
    for (int64_t i = 0; i < st.n; ++i) newest = std::max(newest, st.kv.position(i));
    for (int64_t j = m; j < st.n; ++j) {
      const int64_t i = rank_order_[static_cast<size_t>(j)];
      if (st.kv.position(i) == newest) continue;
      rank_.push_back(RankEntry{r(i), st.kv.position(i), h});
    }
  }
  const auto take = std::min<int64_t>(excess, static_cast<int64_t>(rank_.size()));
  auto lower = [](const RankEntry& x, const RankEntry& y) {
    if (x.r != y.r) return x.r < y.r;
    if (x.pos != y.pos) return x.pos < y.pos;
    return x.head < y.head;
  };
  std::nth_element(rank_.begin(), rank_.begin() + take, rank_.end(), lower);
  for (int64_t h = 0; h < H; ++h) hs[h].budget = hs[h].n + 1;
  for (int64_t j = 0; j < take; ++j) hs[rank_[static_cast<size_t>(j)].head].budget -= 1;
  // Too few candidates (a large safeguard): the rest leave the largest heads, lowest index first.
  for (int64_t left = excess - take; left > 0;) {
    int64_t big = 0;
    for (int64_t h = 1; h < H; ++h)
      if (hs[h].budget > hs[big].budget) big = h;
    if (hs[big].budget <= 1) break;
    hs[big].budget -= 1;
    left -= 1;
  }
}

void EvictionCache::evict_lowest(HeadState& st, int64_t protect_from, const SlotMoved& moved) {
  while (over_budget(st)) {
    const int64_t slot = argmin_score(st, protect_from);
    if (slot < 0) return;
    const int64_t last = st.n - 1;
    remove_slot(st, slot);  // the last slot moves into the removed one
    if (moved) moved(slot, last);
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
  const int64_t slot = st.kv.append(k, v, pos);
  st.n = st.kv.size();
  if (keeps_scores()) {
    grow_to(st.score, static_cast<size_t>(st.n));
    grow_to(st.aux, static_cast<size_t>(st.n));
    st.score[static_cast<size_t>(slot)] = score;
    st.aux[static_cast<size_t>(slot)] = aux;
  }
  return slot;
}

void EvictionCache::remove_slot(HeadState& st, int64_t slot) {
  st.kv.remove(slot);
  const int64_t last = st.n - 1;
  st.n = last;
  if (!keeps_scores()) return;
  if (slot != last) {
    st.score[static_cast<size_t>(slot)] = st.score[static_cast<size_t>(last)];
    st.aux[static_cast<size_t>(slot)] = st.aux[static_cast<size_t>(last)];
  }
  st.score.resize(static_cast<size_t>(last));
  st.aux.resize(static_cast<size_t>(last));
  maybe_shrink(st.score);
  maybe_shrink(st.aux);
}

CacheStats EvictionCache::stats() const {
  CacheStats st;
  st.tokens_seen = offset();
  st.tokens_kept = heads_.empty() ? 0 : heads_[0].n;
  store::StoreBytes b;
  int64_t slots = 0;
  std::set<int64_t> shared;  // a calibration entry several streams read is counted once
  int64_t external = 0;
  for (const HeadState& h : heads_) {
    b += h.kv.bytes();
    slots += cap_bytes(h.score) + cap_bytes(h.aux);
    for (int kv = 0; kv < 2; ++kv) {
      const store::RowCodec& c = h.kv.codec(kv);
      if (c.external_entry() >= 0 && shared.insert(c.external_entry()).second)
        external += c.external_bytes();
    }
  }
  st.content_bytes = static_cast<double>(b.content);
  st.codec_param_bytes = static_cast<double>(b.params);
  st.index_bytes = static_cast<double>(b.index);
  st.policy_bytes = static_cast<double>(slots + policy_bytes() + b.scratch + cap_bytes(rank_) +
                                        cap_bytes(rank_order_));
  st.overhead_bytes = static_cast<double>(heads_.capacity() * sizeof(HeadState));
  st.kept_bytes = st.content_bytes + st.codec_param_bytes + st.policy_bytes + st.index_bytes +
                  st.overhead_bytes;
  st.stored_bytes = static_cast<double>(b.stored);
  const double D = static_cast<double>(head_dim());
  st.full_seq_bytes =
      static_cast<double>(batch() * kv_heads()) * static_cast<double>(offset()) * D * 2.0 * 2.0;
  // 1 until a token is held (nothing to compress yet)
  st.compression_ratio =
      st.full_seq_bytes > 0 && st.kept_bytes > 0 ? st.full_seq_bytes / st.kept_bytes : 1.0;
  st.extra = {
      {"content_bytes", st.content_bytes},
      {"codec_param_bytes", st.codec_param_bytes},
      {"policy_bytes", st.policy_bytes},
      {"index_bytes", st.index_bytes},
      {"overhead_bytes", st.overhead_bytes},
      {"stored_bytes", st.stored_bytes},
      {"external_basis_bytes", static_cast<double>(external)},
      {"raw_tokens", heads_.empty() ? 0.0 : static_cast<double>(heads_[0].kv.bytes().window_rows)},
      {"encoded_tokens",
       heads_.empty() ? 0.0 : static_cast<double>(heads_[0].kv.bytes().encoded_rows)},
      {"chunks", static_cast<double>(b.chunks)},
      {"resident_kv_bytes", static_cast<double>(b.content + b.params)},
      {"entropy_coding_gain",
       b.stored > 0 ? static_cast<double>(b.content + b.params) / static_cast<double>(b.stored)
                    : 1.0},
  };
  return st;
}

// ---- block-wise readers of kept keys -------------------------------------------------------

namespace {
// Block scratch (at most store::kReadBlock rows), Eigen-owned so that vectorized reductions do
// not depend on where the caller's memory sits: results are bit-identical whatever the input
// alignment.
thread_local RowMatF t_block;
thread_local Eigen::VectorXf t_dots;

template <typename Vec>
auto& grow(Vec& v, int64_t n) {
  if (v.size() < n) v.resize(std::max<int64_t>(n, 2 * v.size()));
  return v;
}

// softmax(dots[0:n] * scale) into out[0:n]: the logits scaled and exponentiated in float (twice
// the lanes of double's), the normaliser summed in double; the same arithmetic as the window
// policies' causal_softmax (attention_window.hpp).
thread_local Eigen::VectorXf t_prod;
void softmax_of_dots(const float* dots, int64_t n, float scale, double* out) {
  auto x = grow(t_prod, n).head(n);
  x = Eigen::Map<const Eigen::VectorXf>(dots, n) * scale;
  normalize_exp(x.data(), n, x.maxCoeff(), out);
}

}  // namespace

float row_dot(const store::RowSource& K, int64_t i, const float* q) {
  float out = 0.0f;
  K.dot(i, 1, q, &out);
  return out;
}

// The store's own kernel on its resident rows (fp16 window rows, codec blocks): a row's logit
// depends only on its stored form and q (RowSource::dot's contract), so equal rows get equal
// logits wherever they sit (ties stay ties, e.g. tova's) and row_dot agrees with it bit for bit.
void row_dots(const store::RowSource& K, int64_t n, const float* q, float* out) {
  if (n > 0) K.dot(0, n, q, out);
}

void rows_times_keys(const store::RowSource& K, int64_t n, const float* P, int64_t R, float* L,
                     int64_t ld) {
  const int64_t D = K.dim();
  if (R <= 4) {  // a few probe rows: one pass of the store's dot kernel each beats decode + GEMM
    for (int64_t r = 0; r < R; ++r) row_dots(K, n, P + r * D, L + r * ld);
    return;
  }
  if (t_block.rows() < store::kReadBlock || t_block.cols() != D)
    t_block.resize(store::kReadBlock, D);
  using Strided = Eigen::Map<RowMatF, 0, Eigen::OuterStride<>>;
  const Eigen::Map<const RowMatF> Pm(P, R, D);
  for (int64_t first = 0; first < n; first += store::kReadBlock) {
    const int64_t m = std::min(store::kReadBlock, n - first);
    K.read(first, m, t_block.data());
    Strided(L + first, R, m, Eigen::OuterStride<>(ld)).noalias() =
        Pm * t_block.topRows(m).transpose();
  }
}

void softmax_logits(const store::RowSource& K, int64_t n, const float* q, float scale,
                    double* out) {
  if (n <= 0) return;
  row_dots(K, n, q, grow(t_dots, n).data());
  softmax_of_dots(t_dots.data(), n, scale, out);
}

void driving_attention(const store::RowSource& K, int64_t n, const float* k, const QueryRows& q,
                       bool use_queries, double* out, double* tmp) {
  (void)tmp;
  if (n <= 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(K.dim()));
  if (!use_queries || q.G == 0) {
    softmax_logits(K, n, k, scale, out);
    return;
  }
  thread_local std::vector<double> heads;
  heads.resize(static_cast<size_t>(q.G * n));
  driving_attention_heads(K, n, q, out, heads.data());
}

void driving_attention_heads(const store::RowSource& K, int64_t n, const QueryRows& q, double* out,
                             double* heads) {
  if (n <= 0 || q.G <= 0) return;
  const int64_t D = K.dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // every head's logits in one pass over the stored rows (dot_many: each head's bits as dot's)
  thread_local std::vector<float> qs, dots;
  qs.resize(static_cast<size_t>(q.G * D));
  for (int64_t g = 0; g < q.G; ++g) std::copy_n(q.row(g), D, qs.begin() + g * D);
  dots.resize(static_cast<size_t>(q.G * n));
  K.dot_many(0, n, qs.data(), q.G, dots.data(), n);
  for (int64_t g = 0; g < q.G; ++g) softmax_of_dots(dots.data() + g * n, n, scale, heads + g * n);
  // the sum in head order, then the division: element by element what driving_attention does
  for (int64_t i = 0; i < n; ++i) out[i] = 0.0;
  for (int64_t g = 0; g < q.G; ++g)
    for (int64_t i = 0; i < n; ++i) out[i] += heads[g * n + i];
  const auto G = static_cast<double>(q.G);
  for (int64_t i = 0; i < n; ++i) out[i] /= G;
}

}  // namespace vq::eviction

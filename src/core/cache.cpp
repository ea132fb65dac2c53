#include "veloxquant/cache.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"

namespace vq {

namespace {
// Where an update's s = 0 sits in the stream: its index s is relative to the update.
std::string where(int64_t offset) {
  return " of the update starting at position " + std::to_string(offset) + " (s counts from it)";
}
}  // namespace

double CacheStats::get(const std::string& key, double fallback) const {
  for (const auto& [k, v] : extra)
    if (k == key) return v;
  return fallback;
}

KVCache::KVCache(CacheConfig config, CacheContext ctx) : config_(std::move(config)), ctx_(ctx) {
  VQ_CHECK(ctx_.head_dim >= 1 && ctx_.head_dim <= 65536, InvalidArgument, config_.method(),
           ": head_dim = ", ctx_.head_dim, " is out of range; allowed [1, 65536]");
}

void KVCache::update(const Tensor& keys, const Tensor& values, const Tensor* queries) {
  const std::string& id = config_.method();
  VQ_CHECK(keys.shape() == values.shape(), InvalidArgument, id, ": keys ", keys.shape().str(),
           " and values ", values.shape().str(), " must have the same shape [B, H, S, D]");
  const Shape4& s = keys.shape();
  VQ_CHECK(s.D == ctx_.head_dim, InvalidArgument, id, ": keys have head_dim D = ", s.D,
           " but the cache was built for head_dim ", ctx_.head_dim);
  VQ_CHECK(s.B >= 1 && s.H >= 1, InvalidArgument, id, ": keys ", s.str(),
           " have a zero batch or head dimension; B and H must be >= 1");
  if (B_ != 0) {
    VQ_CHECK(s.B == B_ && s.H == H_, InvalidArgument, id, ": keys ", s.str(),
             " change the batch/head shape; this cache holds B = ", B_, ", H = ", H_);
  }
  if (queries != nullptr) {
    const Shape4& q = queries->shape();
    VQ_CHECK(q.B == s.B && q.S == s.S && q.D == s.D && q.H >= s.H && q.H % s.H == 0,
             InvalidArgument, id, ": queries ", q.str(), " do not match keys ", s.str(),
             "; expected [B, Hq, S, D] with Hq a positive multiple of H = ", s.H);
    if (!queries->all_finite()) queries->check_finite(id + ": queries" + where(offset_));
  }
  // labels are built only on failure: the decode path stays allocation-free
  if (!keys.all_finite()) keys.check_finite(id + ": keys" + where(offset_));
  if (!values.all_finite()) values.check_finite(id + ": values" + where(offset_));
  if (B_ == 0) {
    B_ = s.B;
    H_ = s.H;
    view_.B = B_;
    view_.H = H_;
    view_.D = ctx_.head_dim;
    view_.heads.assign(static_cast<size_t>(B_ * H_), HeadView{});
    on_shape_known(B_, H_);
  }
  if (s.S == 0) return;
  do_update(keys, values, queries);
  offset_ += s.S;
}

FetchResult KVCache::update_and_fetch(const Tensor& keys, const Tensor& values,
                                      const Tensor* queries) {
  update(keys, values, queries);
  return fetch();
}

FetchResult KVCache::fetch() const {
  FetchResult r;
  if (view_.heads.empty()) return r;
  const int64_t n = view_.heads[0].n;
  for (const auto& hv : view_.heads)
    VQ_CHECK(hv.n == n, Error, config_.method(),
             ": heads hold different token counts; use view() for ragged caches");
  const int64_t D = view_.D;
  r.n_kept = n;
  r.keys = Tensor(B_, H_, n, D);
  r.values = Tensor(B_, H_, n, D);
  r.positions.resize(static_cast<size_t>(B_ * H_ * n));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t b = 0; b < B_; ++b) {
    for (int64_t h = 0; h < H_; ++h) {
      const HeadView& hv = view_.at(b, h);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(),
                [&](int64_t x, int64_t y) { return hv.positions[x] < hv.positions[y]; });
      for (int64_t i = 0; i < n; ++i) {
        const int64_t src = order[static_cast<size_t>(i)];
        std::memcpy(r.keys.row(b, h, i), hv.keys + src * D, sizeof(float) * static_cast<size_t>(D));
        std::memcpy(r.values.row(b, h, i), hv.values + src * D,
                    sizeof(float) * static_cast<size_t>(D));
        r.positions[static_cast<size_t>((b * H_ + h) * n + i)] = hv.positions[src];
      }
    }
  }
  return r;
}

CacheStats KVCache::stats() const {
  CacheStats st;
  st.tokens_seen = offset_;
  st.tokens_kept = view_.heads.empty() ? 0 : view_.heads[0].n;
  const double D = static_cast<double>(ctx_.head_dim);
  double kept = 0;
  for (const auto& hv : view_.heads) kept += static_cast<double>(hv.n);
  st.kept_bytes = kept * D * 2.0 * 2.0;  // fp16 K + V
  st.full_seq_bytes = static_cast<double>(B_ * H_) * static_cast<double>(offset_) * D * 2.0 * 2.0;
  st.compression_ratio = st.kept_bytes > 0 ? st.full_seq_bytes / st.kept_bytes : 1.0;
  return st;
}

uint64_t layer_seed(uint64_t seed, int64_t layer) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(layer + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::unique_ptr<KVCache> make_cache(const CacheConfig& config, int64_t head_dim, int64_t layer,
                                    int64_t n_layers, uint64_t seed) {
  VQ_CHECK(!config.method().empty(), InvalidArgument, "make_cache: empty config (no method)");
  VQ_CHECK(layer >= 0 && layer < n_layers, InvalidArgument, "make_cache: layer = ", layer,
           " is outside [0, n_layers = ", n_layers, ")");
  const MethodInfo& m = find_method(config.method());
  CacheContext ctx{head_dim, layer, n_layers, seed};
  return m.make_cache(config, ctx);
}

std::unique_ptr<KVCache> make_cache(const std::string& spec, int64_t head_dim) {
  return make_cache(CacheConfig::parse(spec), head_dim);
}

std::vector<std::unique_ptr<KVCache>> build_caches(const CacheConfig& config, int64_t n_layers,
                                                   int64_t head_dim, uint64_t seed) {
  VQ_CHECK(n_layers >= 1, InvalidArgument, "build_caches: n_layers = ", n_layers,
           " must be >= 1");
  std::vector<std::unique_ptr<KVCache>> caches;
  caches.reserve(static_cast<size_t>(n_layers));
  for (int64_t l = 0; l < n_layers; ++l)
    caches.push_back(make_cache(config, head_dim, l, n_layers, layer_seed(seed, l)));
  return caches;
}

}  // namespace vq

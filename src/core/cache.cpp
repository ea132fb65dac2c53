#include "veloxquant/cache.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "veloxquant/errors.hpp"

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
  // one pass each: NaN / Inf and values the storage cannot hold (fp16 rows overflow to +-inf
  // past 65504, which attention would turn into NaN)
  const StorableRange range = storable_range();
  const auto refuse = [&](const Tensor& t, const char* name) {
    const std::string codec = ctx_.codec.method().empty() ? "" : "+" + ctx_.codec.method();
    t.check_within(id + codec + ": " + name + where(offset_), range.max_abs,
                   std::string(range.what) +
                       "; the methods 'f32' and 'bf16', or a policy composed with '+bf16', keep "
                       "fp32's range");
  };
  if (!keys.all_within(range.max_abs)) refuse(keys, "keys");
  if (!values.all_within(range.max_abs)) refuse(values, "values");
  if (B_ == 0) {
    B_ = s.B;
    H_ = s.H;
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

void KVCache::round_as_stored(int kv, int64_t h, float* rows, int64_t n, int64_t stride) {
  (void)kv, (void)h;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < head_dim(); ++d)
      rows[i * stride + d] = round_to_fp16(rows[i * stride + d]);
}

void KVCache::check_head(int64_t b, int64_t h) const {
  VQ_CHECK(B_ > 0, InvalidArgument, config_.method(),
           ": the cache holds nothing before its first update");
  VQ_CHECK(b >= 0 && b < B_ && h >= 0 && h < H_, InvalidArgument, config_.method(),
           ": head (b = ", b, ", h = ", h, ") is outside B = ", B_, ", H = ", H_);
}

FetchResult KVCache::fetch() const {
  FetchResult r;
  if (B_ == 0) return r;
  const int64_t n = kept(0, 0);
  for (int64_t b = 0; b < B_; ++b)
    for (int64_t h = 0; h < H_; ++h)
      VQ_CHECK(kept(b, h) == n, Error, config_.method(),
               ": heads hold different token counts; read them with keys(b, h) / values(b, h)");
  const int64_t D = ctx_.head_dim;
  r.n_kept = n;
  r.keys = Tensor(B_, H_, n, D);
  r.values = Tensor(B_, H_, n, D);
  r.positions.resize(static_cast<size_t>(B_ * H_ * n));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::vector<float> kbuf(static_cast<size_t>(n * D)), vbuf(static_cast<size_t>(n * D));
  for (int64_t b = 0; b < B_; ++b) {
    for (int64_t h = 0; h < H_; ++h) {
      const int64_t* pos = positions(b, h);
      keys(b, h).read(0, n, kbuf.data());
      values(b, h).read(0, n, vbuf.data());
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return pos[x] < pos[y]; });
      for (int64_t i = 0; i < n; ++i) {
        const int64_t src = order[static_cast<size_t>(i)];
        std::memcpy(r.keys.row(b, h, i), kbuf.data() + src * D,
                    sizeof(float) * static_cast<size_t>(D));
        std::memcpy(r.values.row(b, h, i), vbuf.data() + src * D,
                    sizeof(float) * static_cast<size_t>(D));
        r.positions[static_cast<size_t>((b * H_ + h) * n + i)] = pos[src];
      }
    }
  }
  return r;
}

}  // namespace vq

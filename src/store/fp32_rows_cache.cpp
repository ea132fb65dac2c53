// Fp32RowsCache (include/veloxquant/cache.hpp): a cache over plain fp32 rows, for tests and for
// capturing K/V (calibration). It lives in the store layer because its rows are store::Fp32Rows.
#include <vector>

#include "veloxquant/cache.hpp"

namespace vq {

void Fp32RowsCache::on_shape_known(int64_t B, int64_t H) {
  for (int kv = 0; kv < 2; ++kv) rows_[kv].assign(static_cast<size_t>(B * H), {});
  pos_.assign(static_cast<size_t>(B * H), {});
  publish();
}

std::vector<float>& Fp32RowsCache::rows(int64_t b, int64_t h, int kv) {
  check_head(b, h);
  return rows_[kv][static_cast<size_t>(b * kv_heads() + h)];
}

std::vector<int64_t>& Fp32RowsCache::pos(int64_t b, int64_t h) {
  check_head(b, h);
  return pos_[static_cast<size_t>(b * kv_heads() + h)];
}

void Fp32RowsCache::publish() {
  for (int kv = 0; kv < 2; ++kv) {
    src_[kv].clear();
    for (size_t i = 0; i < pos_.size(); ++i)
      src_[kv].emplace_back(rows_[kv][i].data(), static_cast<int64_t>(pos_[i].size()), head_dim());
  }
}

const store::RowSource& Fp32RowsCache::keys(int64_t b, int64_t h) const {
  check_head(b, h);
  return src_[0][static_cast<size_t>(b * kv_heads() + h)];
}
const store::RowSource& Fp32RowsCache::values(int64_t b, int64_t h) const {
  check_head(b, h);
  return src_[1][static_cast<size_t>(b * kv_heads() + h)];
}
const int64_t* Fp32RowsCache::positions(int64_t b, int64_t h) const {
  check_head(b, h);
  return pos_[static_cast<size_t>(b * kv_heads() + h)].data();
}
int64_t Fp32RowsCache::kept(int64_t b, int64_t h) const {
  if (pos_.empty()) return 0;
  check_head(b, h);
  return static_cast<int64_t>(pos_[static_cast<size_t>(b * kv_heads() + h)].size());
}

CacheStats Fp32RowsCache::stats() const {
  CacheStats st;
  st.tokens_seen = offset();
  st.tokens_kept = kept(0, 0);
  for (size_t i = 0; i < pos_.size(); ++i) {
    st.content_bytes += static_cast<double>((rows_[0][i].capacity() + rows_[1][i].capacity()) * 4);
    st.index_bytes += static_cast<double>(pos_[i].capacity() * 8);
  }
  st.kept_bytes = st.content_bytes + st.index_bytes;
  st.full_seq_bytes = static_cast<double>(batch() * kv_heads()) * static_cast<double>(offset()) *
                      static_cast<double>(head_dim()) * 2.0 * 2.0;
  st.compression_ratio = st.kept_bytes > 0 ? st.full_seq_bytes / st.kept_bytes : 1.0;
  return st;
}

}  // namespace vq

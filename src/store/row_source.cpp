// RowSource's default dot() / accumulate(): through read(), kReadBlock rows at a time, into one
// per-thread scratch block (bounded: kReadBlock * dim floats, shared by every source on the
// thread).
#include "veloxquant/row_source.hpp"

namespace vq::store {

namespace {

float* scratch_block(int64_t n, int64_t dim) {
  thread_local std::vector<float> buf;
  const size_t need = static_cast<size_t>(std::min(n, kReadBlock) * dim);
  if (buf.size() < need) buf.resize(need);
  return buf.data();
}

}  // namespace

void RowSource::dot(int64_t first, int64_t n, const float* q, float* out) const {
  const int64_t D = dim();
  if (n <= 0) return;
  float* buf = scratch_block(n, D);
  for (int64_t b = 0; b < n; b += kReadBlock) {
    const int64_t m = std::min(kReadBlock, n - b);
    read(first + b, m, buf);
    for (int64_t i = 0; i < m; ++i) {
      const float* r = buf + i * D;
      float s = 0.0f;
      for (int64_t d = 0; d < D; ++d) s += r[d] * q[d];
      out[b + i] = s;
    }
  }
}

void RowSource::accumulate(int64_t first, int64_t n, const float* w, float* acc) const {
  const int64_t D = dim();
  if (n <= 0) return;
  float* buf = scratch_block(n, D);
  for (int64_t b = 0; b < n; b += kReadBlock) {
    const int64_t m = std::min(kReadBlock, n - b);
    read(first + b, m, buf);
    for (int64_t i = 0; i < m; ++i) {
      const float wi = w[b + i];
      const float* r = buf + i * D;
      for (int64_t d = 0; d < D; ++d) acc[d] += wi * r[d];
    }
  }
}

}  // namespace vq::store

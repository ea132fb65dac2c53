// RowSource's default dot() / accumulate(): through read(), kReadBlock rows at a time, into one
// per-thread scratch block (bounded: kReadBlock * dim floats, shared by every source on the
// thread), then the fp32 row kernels (store/row_kernels.hpp) - the same arithmetic the engine
// applies to rows it reads itself (pre-RoPE keys), so both give the same bits.
#include "veloxquant/row_source.hpp"

#include "store/row_kernels.hpp"

namespace vq::store {

namespace {

float* scratch_block(int64_t n, int64_t dim) {
  thread_local std::vector<float> buf;
  const size_t need = static_cast<size_t>(std::min(n, kReadBlock) * dim);
  if (buf.size() < need) buf.resize(need);
  return buf.data();
}

// fn(b, m, rows) for consecutive blocks [first + b, first + b + m) of at most kReadBlock rows,
// read into the scratch block.
template <typename Fn>
void through_scratch(const RowSource& src, int64_t first, int64_t n, Fn&& fn) {
  if (n <= 0) return;
  const int64_t D = src.dim();
  float* buf = scratch_block(n, D);
  for (int64_t b = 0; b < n; b += kReadBlock) {
    const int64_t m = std::min(kReadBlock, n - b);
    src.read(first + b, m, buf);
    fn(b, m, reinterpret_cast<const uint8_t*>(buf));
  }
}

}  // namespace

void RowSource::dot(int64_t first, int64_t n, const float* q, float* out) const {
  const int64_t D = dim();
  through_scratch(*this, first, n, [&](int64_t b, int64_t m, const uint8_t* rows) {
    float_dot_rows(FloatRows::F32, rows, 4 * D, m, D, q, out + b);
  });
}

void RowSource::accumulate(int64_t first, int64_t n, const float* w, float* acc) const {
  const int64_t D = dim();
  through_scratch(*this, first, n, [&](int64_t b, int64_t m, const uint8_t* rows) {
    float_axpy_rows(FloatRows::F32, rows, 4 * D, m, D, w + b, acc);
  });
}

void RowSource::dot_many(int64_t first, int64_t n, const float* qs, int64_t nq, float* out,
                         int64_t out_stride) const {
  for (int64_t j = 0; j < nq; ++j) dot(first, n, qs + j * dim(), out + j * out_stride);
}

void RowSource::accumulate_many(int64_t first, int64_t n, const float* w, int64_t w_stride,
                                int64_t nw, float* acc) const {
  for (int64_t j = 0; j < nw; ++j) accumulate(first, n, w + j * w_stride, acc + j * dim());
}

}  // namespace vq::store

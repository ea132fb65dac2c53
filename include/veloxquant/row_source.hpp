// RowSource: the rows of one kept head (keys or values) as readers see them. Eviction policies
// and attention read kept rows only through this interface, so they never depend on (or copy)
// the storage form. Two ways to read:
//   - read(): decode rows into caller-owned scratch (a bounded block at a time);
//   - dot() / accumulate(): the two products attention needs, which a store computes on its
//     resident bytes (fp16, bf16, q8_0, q4_0 rows) without decoding them; a source without such
//     kernels does them through read() into bounded scratch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace vq::store {

/// Rows decoded per block by the helpers below (bounded scratch: kReadBlock * D floats).
constexpr int64_t kReadBlock = 256;

class RowSource {
 public:
  virtual ~RowSource() = default;
  /// Rows held (slot order).
  virtual int64_t rows() const = 0;
  /// Floats per row.
  virtual int64_t dim() const = 0;
  /// Decode rows [first, first + n) (0 <= first, first + n <= rows()) into out [n, dim()].
  virtual void read(int64_t first, int64_t n, float* out) const = 0;
  /// out[i] = row (first + i) . q for i in [0, n) (q: dim() floats). A row's value depends only
  /// on its stored form and q, never on first / n. Default: read() kReadBlock rows at a time into
  /// per-thread scratch, then the fp32 row kernel (src/store/row_kernels.hpp).
  virtual void dot(int64_t first, int64_t n, const float* q, float* out) const;
  /// acc[d] += sum_i w[i] * row (first + i)[d] for d in [0, dim()), the rows added one after the
  /// other in order (so consecutive calls over [a, b) then [b, c) equal one call over [a, c)).
  /// Default: read() into per-thread scratch, then the fp32 row kernel.
  virtual void accumulate(int64_t first, int64_t n, const float* w, float* acc) const;
  /// dot() for nq queries at once (the query heads that share a KV head): query j at
  /// qs + j * dim(), its n results at out + j * out_stride. Each result has the bits dot() gives
  /// for that query alone; a store may unpack its rows once for every query. Default: dot() per
  /// query.
  virtual void dot_many(int64_t first, int64_t n, const float* qs, int64_t nq, float* out,
                        int64_t out_stride) const;
  /// accumulate() for nw weight rows at once: weights j at w + j * w_stride, added to
  /// acc + j * dim(). Each sum has the bits accumulate() gives for those weights alone.
  /// Default: accumulate() per weight row.
  virtual void accumulate_many(int64_t first, int64_t n, const float* w, int64_t w_stride,
                               int64_t nw, float* acc) const;
};

/// Rows of a row-major fp32 matrix (tests, chunk rows not yet stored).
class Fp32Rows final : public RowSource {
 public:
  Fp32Rows(const float* data, int64_t n, int64_t dim) : data_(data), n_(n), dim_(dim) {}
  int64_t rows() const override { return n_; }
  int64_t dim() const override { return dim_; }
  void read(int64_t first, int64_t n, float* out) const override {
    std::copy(data_ + first * dim_, data_ + (first + n) * dim_, out);
  }

 private:
  const float* data_;
  int64_t n_, dim_;
};

/// Rows [0, a.rows()) of a, then rows of b: a kept head followed by incoming rows.
class ConcatRows final : public RowSource {
 public:
  ConcatRows(const RowSource& a, const RowSource& b) : a_(a), b_(b) {}
  int64_t rows() const override { return a_.rows() + b_.rows(); }
  int64_t dim() const override { return a_.dim(); }
  void read(int64_t first, int64_t n, float* out) const override {
    const int64_t na = a_.rows();
    if (first < na) {
      const int64_t m = std::min(n, na - first);
      a_.read(first, m, out);
      first += m;
      n -= m;
      out += m * dim();
    }
    if (n > 0) b_.read(first - na, n, out);
  }
  void dot(int64_t first, int64_t n, const float* q, float* out) const override {
    split(first, n, [&](const RowSource& s, int64_t f, int64_t m, int64_t done) {
      s.dot(f, m, q, out + done);
    });
  }
  void accumulate(int64_t first, int64_t n, const float* w, float* acc) const override {
    split(first, n, [&](const RowSource& s, int64_t f, int64_t m, int64_t done) {
      s.accumulate(f, m, w + done, acc);
    });
  }

 private:
  // fn(source, first, n, rows done before) for the part in a, then the part in b.
  template <typename Fn>
  void split(int64_t first, int64_t n, Fn&& fn) const {
    const int64_t na = a_.rows();
    int64_t done = 0;
    if (first < na) {
      const int64_t m = std::min(n, na - first);
      fn(a_, first, m, done);
      done = m;
    }
    if (n > done) fn(b_, first + done - na, n - done, done);
  }

  const RowSource& a_;
  const RowSource& b_;
};

/// Calls fn(first, n, rows) for consecutive blocks of at most kReadBlock rows covering
/// [0, src.rows()), in order; rows points into `scratch` (grown to kReadBlock * dim once).
template <typename Fn>
void for_each_block(const RowSource& src, std::vector<float>& scratch, Fn&& fn) {
  const int64_t n = src.rows(), D = src.dim();
  const size_t need = static_cast<size_t>(std::min(n, kReadBlock) * D);
  if (scratch.size() < need) scratch.resize(need);
  for (int64_t first = 0; first < n; first += kReadBlock) {
    const int64_t m = std::min(kReadBlock, n - first);
    src.read(first, m, scratch.data());
    fn(first, m, static_cast<const float*>(scratch.data()));
  }
}

}  // namespace vq::store

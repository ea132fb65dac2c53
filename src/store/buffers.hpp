// How the store's and the policies' per-token buffers grow and shrink, and what they count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace vq::store {

/// Allocated bytes of a buffer (capacity, not size): what accounting reports.
template <typename T>
int64_t cap_bytes(const std::vector<T>& v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}

/// Resize to n elements, growing capacity by half (amortized O(1) appends, spare <= 1/3).
template <typename T>
void grow_to(std::vector<T>& v, size_t n) {
  if (n > v.capacity()) v.reserve(std::max(n, v.capacity() + v.capacity() / 2 + 8));
  v.resize(n);
}

/// Release capacity once less than half of it is used (memory follows the rows held).
template <typename T>
void maybe_shrink(std::vector<T>& v) {
  if (v.capacity() > 64 && v.size() < v.capacity() / 2) v.shrink_to_fit();
}

/// Rows of a fixed byte width in pages of page_rows() rows. Every page but the last holds
/// exactly page_rows() rows in exactly that much memory; only the last one grows (by half, as
/// grow_to) and shrinks. So the spare memory of a store is at most a third of one page, whatever
/// the number of rows, where one growing buffer would keep up to a third of everything (and need
/// twice the memory while it moves). A row never straddles two pages.
class RowPages {
 public:
  /// Pages of about kPageBytes (at least 16 rows).
  static constexpr int64_t kPageBytes = 64 * 1024;

  RowPages() = default;
  explicit RowPages(int64_t row_bytes)
      : rb_(row_bytes),
        page_rows_(std::max<int64_t>(16, kPageBytes / std::max<int64_t>(1, row_bytes))) {}

  int64_t rows() const { return n_; }
  int64_t row_bytes() const { return rb_; }
  int64_t page_rows() const { return page_rows_; }
  uint8_t* row(int64_t r) {
    return pages_[static_cast<size_t>(r / page_rows_)].data() + (r % page_rows_) * rb_;
  }
  const uint8_t* row(int64_t r) const {
    return pages_[static_cast<size_t>(r / page_rows_)].data() + (r % page_rows_) * rb_;
  }
  /// Rows r, r + 1, ... that lie contiguously after row(r): up to the end of its page.
  int64_t run(int64_t r) const { return std::min(n_, (r / page_rows_ + 1) * page_rows_) - r; }

  /// Adds a row at the end and returns it (its bytes are unspecified).
  uint8_t* push_back() {
    if (n_ % page_rows_ == 0) pages_.emplace_back();
    std::vector<uint8_t>& last = pages_.back();
    const size_t want = last.size() + static_cast<size_t>(rb_);
    if (want > last.capacity())
      last.reserve(std::min(static_cast<size_t>(page_rows_ * rb_),
                            std::max(want, last.capacity() + last.capacity() / 2 + size_t{8})));
    last.resize(want);
    return row(n_++);
  }
  /// Drops the last row; a page left empty is freed. Call trim() after a run of pop_back().
  void pop_back() {
    --n_;
    std::vector<uint8_t>& last = pages_.back();
    last.resize(last.size() - static_cast<size_t>(rb_));
    if (last.empty()) pages_.pop_back();
  }
  /// Releases the spare capacity of a last page less than half used.
  void trim() {
    if (!pages_.empty()) maybe_shrink(pages_.back());
  }
  /// Copies row `from` over row `to`.
  void copy_row(int64_t from, int64_t to) {
    if (from != to) std::memcpy(row(to), row(from), static_cast<size_t>(rb_));
  }
  /// Allocated bytes: the pages' capacities and the page table.
  int64_t capacity_bytes() const {
    int64_t b = cap_bytes(pages_);
    for (const auto& p : pages_) b += cap_bytes(p);
    return b;
  }

 private:
  int64_t rb_ = 0, page_rows_ = 16, n_ = 0;
  std::vector<std::vector<uint8_t>> pages_;
};

}  // namespace vq::store

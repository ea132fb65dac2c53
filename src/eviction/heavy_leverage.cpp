#include "eviction/heavy_leverage.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__AVX512BW__)
#include <immintrin.h>
#endif

#include "core/static_count.hpp"
#include "eviction/leverage.hpp"

namespace vq::eviction {
namespace {

// The basis and every product against it are stored with their r columns padded to a multiple
// of kLanes (zeros beyond r), so the products below run on whole 16-float groups held in
// registers: at this solver's sizes (t <= 32 rows, r <= 16, D <= 128) a general GEMM spends more
// on packing and dispatch than on arithmetic.
constexpr int64_t kLanes = 16;

int64_t padded(int64_t r) {
  return (r + kLanes - 1) / kLanes * kLanes;
}

typedef float Floats16 __attribute__((vector_size(64)));
static_assert(sizeof(Floats16) == kLanes * sizeof(float));

// R rows of A against one 16-column group of B: R independent chains (eight keep both FMA units
// busy through their latency; four, as before session 27, left half of them idle).
template <int R>
void rows_times_basis(const float* __restrict a, int64_t D, const float* __restrict B, int64_t ldb,
                      int64_t c0, float* __restrict out) {
  Floats16 s[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) s[i] = Floats16{};
  for (int64_t d = 0; d < D; ++d) {
    Floats16 b;
    std::memcpy(&b, B + d * ldb + c0, sizeof b);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) s[i] += a[i * D + d] * b;
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) std::memcpy(out + i * ldb + c0, &s[i], sizeof s[i]);
}

// out[j * ldb + c] = sum_d A[j * D + d] * B[d * ldb + c] for j < m, c < ldb (a multiple of
// kLanes): each output one chain over d in ascending order, whatever m or the grouping of rows.
void times_basis(const float* __restrict A, int64_t m, int64_t D, const float* __restrict B,
                 int64_t ldb, float* __restrict out) {
  for (int64_t c0 = 0; c0 < ldb; c0 += kLanes) {
    int64_t j = 0;
    for (; j + 8 <= m; j += 8) rows_times_basis<8>(A + j * D, D, B, ldb, c0, out + j * ldb);
    for (; j + 4 <= m; j += 4) rows_times_basis<4>(A + j * D, D, B, ldb, c0, out + j * ldb);
    for (; j < m; ++j) rows_times_basis<1>(A + j * D, D, B, ldb, c0, out + j * ldb);
  }
}

// The orthonormalization's columns are padded with zeros to whole Lanes8 groups, and every dot
// product keeps two groups of partial sums (the even and the odd groups of x times y, ascending),
// adds them, and adds the lanes in one fixed tree: the same bits on every call and every vector
// width, without a serial chain of D dependent adds.

double lane_sum(Lanes8 a) {
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

// Gram-Schmidt on columns of `groups` Lanes8 each; KC > 0 fixes the count at compile time (the
// head dims models use), so a column's loops unroll and the column being built stays in registers.
template <int KC>
struct GramSchmidt {
  int groups;  // used when KC == 0

  int k() const { return KC > 0 ? KC : groups; }

  // x . y in two interleaved chains (even and odd groups), half the dependent length of one
  double dot(const Lanes8* x, const Lanes8* y) const {
    const int K = k();
    Lanes8 a0 = x[0] * y[0], a1 = Lanes8{};
    int g = 1;
    for (; g + 1 < K; g += 2) {
      a1 += x[g] * y[g];
      a0 += x[g + 1] * y[g + 1];
    }
    if (g < K) a1 += x[g] * y[g];
    return lane_sum(a0 + a1);
  }

  double norm2(const Lanes8* x) const { return dot(x, x); }

  // The first axis with the smallest coverage (entries finite and >= 0): the minimum over whole
  // groups when D fills them, then its first position (the axis a scan keeping the first minimum
  // finds, without a dependent compare per axis).
  static int64_t least_covered(const double* cover, int64_t D) {
    double m = cover[0];
    int64_t d = 1;
    if (D % 8 == 0) {
      Lanes8 mv;
      std::memcpy(&mv, cover, sizeof mv);
      for (d = 8; d < D; d += 8) {
        Lanes8 x;
        std::memcpy(&x, cover + d, sizeof x);
        mv = x < mv ? x : mv;
      }
      for (int l = 0; l < 8; ++l) m = std::min(m, mv[l]);
    } else {
      for (; d < D; ++d) m = std::min(m, cover[d]);
    }
    for (d = 0; d < D; ++d)
      if (cover[d] == m) break;
    return d;
  }

  // One classical pass: x -= sum_p (q_p . x) q_p over the c columns of Q, every coefficient taken
  // from the same x (c independent dot products, not the modified form's dependent chain).
  void project_out(const Lanes8* __restrict Q, int64_t c, Lanes8* __restrict x,
                   double* __restrict h) const {
    for (int64_t p = 0; p < c; ++p) h[p] = dot(Q + p * k(), x);
    subtract(Q, c, x, h);
  }

  // x -= sum_p h[p] q_p, column by column: K independent chains per step instead of one chain
  // of c per group
  void subtract(const Lanes8* __restrict Q, int64_t c, Lanes8* __restrict x,
                const double* __restrict h) const {
    const int K = k();
    for (int64_t p = 0; p < c; ++p) {
      const Lanes8* q = Q + p * K;
      for (int g = 0; g < K; ++g) x[g] -= h[p] * q[g];
    }
  }

  // Columns 0..r-1 of Y (D x ld, row-major) into Q's r columns of k() groups; cover[k() * 8].
  void run(const float* Y, int64_t ld, int64_t D, int64_t r, Lanes8* __restrict Q,
           double* __restrict h, double* __restrict cover) const {
    const int K = k();
    Lanes8 local[KC > 0 ? KC : 1];
    // by its reciprocal: a vector division is several times slower than the multiply
    const auto scale = [&](Lanes8* x, double by) {
      const double inv = 1.0 / by;
      for (int g = 0; g < K; ++g) x[g] *= inv;
    };
    // Y's columns into Q's storage in one pass over Y's rows (zero padding included)
    double* qd = reinterpret_cast<double*>(Q);
    for (int64_t c = 0; c < r; ++c)
      for (int g = 0; g < K; ++g) Q[c * K + g] = Lanes8{};
    for (int64_t d = 0; d < D; ++d)
      for (int64_t c = 0; c < r; ++c) qd[c * 8 * K + d] = static_cast<double>(Y[d * ld + c]);
    for (int64_t c = 0; c < r; ++c) {
      Lanes8* x = KC > 0 ? local : Q + c * K;
      if (KC > 0)
        for (int g = 0; g < K; ++g) x[g] = Q[c * K + g];
      // The column is projected as it comes: its squared length s0 and its first-pass
      // coefficients do not wait on each other, and the thresholds are relative to s0.
      const double s0 = norm2(x);
      bool ok = s0 > 0 && std::isfinite(s0);
      if (ok) {
        project_out(Q, c, x, h);
        double s1 = norm2(x);
        // a second pass only when the first removed more than half of the column's energy
        // (Kahan's criterion: a column that kept more lost no orthogonality to cancellation), and
        // not when the first left nothing (a pass only removes: the column is replaced anyway)
        const double empty = 1e-14 * s0;  // (1e-7 of its length)^2
        if (!(s1 > 0.5 * s0) && s1 > empty) {
          project_out(Q, c, x, h);
          s1 = norm2(x);
        }
        ok = s1 > empty && std::isfinite(s1);
        if (ok) scale(x, std::sqrt(s1));
      }
      if (!ok) {
        const int64_t axis = least_covered(cover, D);
        for (int g = 0; g < K; ++g) x[g] = Lanes8{};
        // c < D columns cover at most c / D < 1 of the axes' total on average
        // the first pass's coefficients q_p . e_axis are the basis's entries at the axis
        for (int64_t p = 0; p < c; ++p) h[p] = qd[p * 8 * K + axis];
        x[axis / 8][axis % 8] = 1.0;
        subtract(Q, c, x, h);
        project_out(Q, c, x, h);
        scale(x, std::sqrt(norm2(x)));
      }
      for (int g = 0; g < K; ++g) {
        Q[c * K + g] = x[g];
        for (int l = 0; l < 8; ++l) cover[8 * g + l] += x[g][l] * x[g][l];
      }
    }
  }
};

typedef float Floats8 __attribute__((vector_size(32)));

// In place: r[l][k] <- r[k][l] for an 8 x 8 block, in three rounds of pairwise shuffles.
[[gnu::always_inline]] inline void transpose8(Lanes8 r[8]) {
  Lanes8 a[8], b[8];
  for (int i = 0; i < 8; i += 2) {
    a[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 2, 10, 4, 12, 6, 14);
    a[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 1, 9, 3, 11, 5, 13, 7, 15);
  }
  for (int i = 0; i < 8; i += 4)
    for (int h = 0; h < 2; ++h) {
      b[i + h] = __builtin_shufflevector(a[i + h], a[i + h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      b[i + h + 2] = __builtin_shufflevector(a[i + h], a[i + h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int h = 0; h < 4; ++h) {
    r[h] = __builtin_shufflevector(b[h], b[h + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    r[h + 4] = __builtin_shufflevector(b[h], b[h + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

// dst[i * ldd + j] = src[j * lds + i] for i < m, j < ldd (a multiple of 8), zero for j >= rows:
// src holds `rows` rows of doubles padded to lds >= m rounded up to 8 entries. Out is double or
// float.
template <typename Out>
void transpose_blocks(const double* src, int64_t rows, int64_t lds, int64_t m, Out* dst,
                      int64_t ldd, int64_t cols) {
  for (int64_t bj = 0; bj < cols; bj += 8)
    for (int64_t bi = 0; bi < m; bi += 8) {
      Lanes8 r[8];
      for (int k = 0; k < 8; ++k) {
        if (bj + k < rows) {
          std::memcpy(&r[k], src + (bj + k) * lds + bi, sizeof r[k]);
        } else {
          r[k] = Lanes8{};
        }
      }
      transpose8(r);
      for (int l = 0; l < 8 && bi + l < m; ++l) {
        if constexpr (std::is_same_v<Out, double>) {
          std::memcpy(dst + (bi + l) * ldd + bj, &r[l], sizeof r[l]);
        } else {
          const Floats8 f = __builtin_convertvector(r[l], Floats8);
          std::memcpy(dst + (bi + l) * ldd + bj, &f, sizeof f);
        }
      }
    }
}

// Rows x_j, from <= j < to (G groups each) <- (x_j - sum_{k<j} L_jk x_k) / L_jj in place, L_jk =
// Lc[k * ldl + j]: the rows of L^-1 X. Each group of eight entries is one chain over k; with KC > 0
// (the head dims models use) the row being built stays in registers and each L_jk is loaded once
// for all groups.
template <int KC>
void solve_rows(Lanes8* q, int64_t from, int64_t to, int groups, const double* Lc, int64_t ldl) {
  const int G = KC > 0 ? KC : groups;
  Lanes8 local[KC > 0 ? KC : 1];
  for (int64_t j = from; j < to; ++j) {
    Lanes8* x = KC > 0 ? local : q + j * G;
    if (KC > 0)
      for (int g = 0; g < G; ++g) x[g] = q[j * G + g];
    for (int64_t k = 0; k < j; ++k) {
      const double c = Lc[k * ldl + j];
      const Lanes8* y = q + k * G;
      for (int g = 0; g < G; ++g) x[g] -= c * y[g];
    }
    const double inv = 1.0 / Lc[j * ldl + j];
    for (int g = 0; g < G; ++g) q[j * G + g] = x[g] * inv;
  }
}
}  // namespace

void HeavyLeverage::ensure_slots(int64_t n) {
  if (static_cast<int64_t>(state_.size()) >= n) return;
  const auto rows =
      static_cast<size_t>(std::max<int64_t>(n, 2 * static_cast<int64_t>(state_.size())));
  vn_.resize(rows, 0.0f);
  qn_.resize(rows, 0.0f);
  state_.resize(rows, kNothing);
}

void HeavyLeverage::row_replaced(int64_t i) {
  if (i < 0) return;
  if (i < static_cast<int64_t>(state_.size())) state_[static_cast<size_t>(i)] = kNothing;
  dirty_.push_back(i);
}

void HeavyLeverage::row_moved(int64_t from, int64_t to) {
  const auto n = static_cast<int64_t>(state_.size());
  if (to < 0 || to >= n) return;
  const auto t = static_cast<size_t>(to);
  dirty_.push_back(to);
  if (from < 0 || from >= n) {
    state_[t] = kNothing;
    return;
  }
  const auto f = static_cast<size_t>(from);
  vn_[t] = vn_[f];
  qn_[t] = qn_[f];
  state_[t] = state_[f];
  state_[f] = kNothing;
  dirty_.push_back(from);
}

void HeavyLeverage::invalidate() {
  all_dirty_ = true;
  ready_ = false;
}

void HeavyLeverage::project_rows(const store::RowSource& V, const std::vector<int64_t>& slots) {
  const int64_t D = Q_.rows();
  const auto m = static_cast<int64_t>(slots.size());
  if (m == 0) return;
  Vr_.resize(m, D);
  for (int64_t j = 0; j < m; ++j) V.read(slots[static_cast<size_t>(j)], 1, Vr_.data() + j * D);
  Pr_.resize(m, Q_.cols());
  times_basis(Vr_.data(), m, D, Q_.data(), Q_.cols(), Pr_.data());
  for (int64_t j = 0; j < m; ++j) {
    const auto i = static_cast<size_t>(slots[static_cast<size_t>(j)]);
    vn_[i] = Vr_.row(j).squaredNorm();
    qn_[i] = Pr_.row(j).squaredNorm();
    state_[i] = kProjected;
  }
}

// T_ = the heaviest rows (a_i^2 ||v_i||^2 descending, slot ascending on ties) until they hold
// `mass` of E, at least `need` and at most cap = max(max_rows, need) of them. The candidates are
// found without sorting all n: rows are binned by how far below the heaviest they sit, in eighths
// of a binary order of magnitude (the exponent and top 3 mantissa bits of the double, which order
// positive doubles), and bins are taken from the top until they hold cap rows; a crowded last bin
// is split again by the next 8 mantissa bits; only the rows above the split are ranked. Rows more
// than 2^-32 below the heaviest (less than 1e-9 of it each) count as weightless: when some of
// them are needed to reach `need`, the lowest slots are taken.
void HeavyLeverage::select_heavy(int64_t n, int64_t need, double heaviest) {
  const auto cap = std::min<int64_t>(n, std::max(lim_.max_rows, need));
  constexpr int kBins = 256;  // 32 octaves, then the weightless bin
  constexpr int kWeightless = kBins;
  constexpr int64_t kGroup = 32;  // bins per vector compare
  constexpr uint16_t kPastEnd = 0xffff;
  typedef uint16_t Bins32 __attribute__((vector_size(64)));
  typedef int16_t Counts32 __attribute__((vector_size(64)));
  const auto bits_of = [](double x) {
    uint64_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    return bits;
  };
  const auto top = static_cast<int64_t>(bits_of(heaviest) >> 49);
  // Each row's bin, then the cut (the first bin where the rows in it and above reach cap) by an
  // eight-way search over the bin thresholds, each round one pass of vector compares over the
  // bins (three rounds for 256 bins) instead of a scattered histogram count per row.
  const int64_t groups = (n + kGroup - 1) / kGroup;
  bin_.resize(static_cast<size_t>(groups * kGroup));
  for (int64_t i = 0; i < n; ++i) {
    const auto key = static_cast<int64_t>(bits_of(e_[static_cast<size_t>(i)]) >> 49);
    bin_[static_cast<size_t>(i)] = static_cast<uint16_t>(std::min<int64_t>(kWeightless, top - key));
  }
  std::fill(bin_.begin() + n, bin_.end(), kPastEnd);  // never at or below a threshold
  // how many rows have a bin <= th[j], j < 8 (16-bit lane counters, emptied every 2^15 groups)
  const auto rows_upto = [&](const std::array<int, 8>& th, std::array<int64_t, 8>& out) {
    out.fill(0);
    for (int64_t g0 = 0; g0 < groups; g0 += 32767) {
      Counts32 acc[8] = {};
      for (int64_t g = g0; g < std::min(groups, g0 + 32767); ++g) {
        Bins32 v;
        std::memcpy(&v, bin_.data() + g * kGroup, sizeof v);
        for (int j = 0; j < 8; ++j)
          acc[j] -= (v <= static_cast<uint16_t>(th[static_cast<size_t>(j)]));
      }
      for (int j = 0; j < 8; ++j)
        for (int l = 0; l < static_cast<int>(kGroup); ++l) out[static_cast<size_t>(j)] += acc[j][l];
    }
  };
  int cut = kWeightless;
  int64_t above = 0;     // rows in the bins before `cut`
  int64_t upto_cut = 0;  // rows in the bins up to `cut`
  {
    int lo = 0, hi = kBins - 1;  // the cut, when there is one, lies in [lo, hi]
    int64_t below_lo = 0;        // rows in the bins before lo
    std::array<int, 8> th{};
    std::array<int64_t, 8> c{};
    bool found = false;
    while (true) {
      const int step = (hi - lo + 8) / 8;  // ceil((hi - lo + 1) / 8)
      for (int j = 0; j < 8; ++j)
        th[static_cast<size_t>(j)] = std::min(hi, lo + step * (j + 1) - 1);
      rows_upto(th, c);
      int j = 0;
      while (j < 8 && c[static_cast<size_t>(j)] < cap) ++j;
      if (j == 8) break;  // fewer than cap rows outside the weightless bin (first round only)
      found = true;
      const int new_lo = j == 0 ? lo : th[static_cast<size_t>(j - 1)] + 1;
      if (j > 0) below_lo = c[static_cast<size_t>(j - 1)];
      hi = th[static_cast<size_t>(j)];
      lo = new_lo;
      upto_cut = c[static_cast<size_t>(j)];
      if (lo == hi) break;
    }
    if (found) {
      cut = lo;
      above = below_lo;
    }
  }
  int sub = 0;  // rows of the cut bin from this sub-bin up are candidates
  if (cut < kWeightless && upto_cut - above > 2 * (cap - above)) {
    std::array<int32_t, 256> h2{};
    for (int64_t i = 0; i < n; ++i)
      if (bin_[static_cast<size_t>(i)] == cut)
        h2[(bits_of(e_[static_cast<size_t>(i)]) >> 41) & 0xff] += 1;
    int64_t held = above;
    for (int v = 255; v >= 0; --v) {
      held += h2[static_cast<size_t>(v)];
      if (held >= cap) {
        sub = v;
        break;
      }
    }
  }
  cand_.clear();
  const uint16_t* bins = bin_.data();
  const double* ev = e_.data();
  // the rows in the bins before the cut, and the cut bin's rows from sub-bin `sub` up
  const auto take = [&](int64_t i) {
    const int b = bins[i];
    if (b < cut ||
        (b == cut && cut < kWeightless && static_cast<int>((bits_of(ev[i]) >> 41) & 0xff) >= sub))
      cand_.emplace_back(ev[i], i);
  };
#if defined(__AVX512BW__)
  // only rows with a bin <= limit can be taken (the padding's bins never are): a 32-bit mask per
  // group of bins, visited by its set bits, so a few candidates among n rows cost a few visits
  const int limit = cut < kWeightless ? cut : kWeightless - 1;
  const __m512i lim = _mm512_set1_epi16(static_cast<int16_t>(limit));
  for (int64_t g = 0; g < groups; ++g) {
    auto m =
        static_cast<uint32_t>(_mm512_cmple_epu16_mask(_mm512_loadu_si512(bins + g * kGroup), lim));
    for (; m != 0; m &= m - 1) take(g * kGroup + __builtin_ctz(m));
  }
#else
  for (int64_t i = 0; i < n; ++i) take(i);
#endif
  const auto heavier = [](const std::pair<double, int64_t>& x,
                          const std::pair<double, int64_t>& y) {
    return x.first > y.first || (x.first == y.first && x.second < y.second);
  };
  if (static_cast<int64_t>(cand_.size()) > cap) {
    std::nth_element(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(cap), cand_.end(),
                     heavier);
    cand_.resize(static_cast<size_t>(cap));
  }
  std::sort(cand_.begin(), cand_.end(), heavier);
  for (int64_t i = 0; i < n && cut == kWeightless && static_cast<int64_t>(cand_.size()) < cap; ++i)
    if (bin_[static_cast<size_t>(i)] == kWeightless)
      cand_.emplace_back(e_[static_cast<size_t>(i)], i);
  T_.clear();
  const double target = lim_.mass * E_;
  double held = 0;
  for (const auto& c : cand_) {
    T_.push_back(c.second);
    held += c.first;
    if (lim_.mass < 1.0 && static_cast<int64_t>(T_.size()) >= need && held >= target) break;
  }
}

// Q_ <- an orthonormal basis of the span of Y_'s first r columns: classical Gram-Schmidt in double,
// a second pass for a column that lost more than half its energy in the first (it restores the
// orthogonality the first loses when a column is nearly dependent on the earlier ones), with both
// thresholds relative to each column's own length (Y = Gram Q has columns of very different
// lengths). A column with nothing left after the
// passes (under 1e-7 of its length: Y is numerically rank-deficient, e.g. when a few rows hold all
// the weight) is replaced by the coordinate axis the basis so far covers least, so the basis always
// has r columns.
void HeavyLeverage::orthonormalize(int64_t D, int64_t r) {
  const int64_t ld = Y_.cols();
  const int64_t K = (D + 7) / 8;           // groups of eight doubles per column
  qc_.resize(static_cast<size_t>(r * K));  // GramSchmidt::run zeroes the columns it fills
  cover_.assign(static_cast<size_t>(8 * K + r), 0.0);
  double* h = cover_.data() + 8 * K;
  with_head_dim(D, [&](auto dc) {
    constexpr int KC = decltype(dc)::value / 8;
    GramSchmidt<KC>{static_cast<int>(K)}.run(Y_.data(), ld, D, r, qc_.data(), h, cover_.data());
  });
  Q_.setZero(D, ld);
  const auto* q = reinterpret_cast<const double*>(qc_.data());
  for (int64_t d = 0; d < D; ++d)
    for (int64_t c = 0; c < r; ++c) Q_(d, c) = static_cast<float>(q[c * 8 * K + d]);
}

// Q_ <- an orthonormal basis of the heavy rows' own span, for t == r rows: the top-r eigenspace of
// their Gram matrix V_T^T diag(a_T^2) V_T (rank at most r) is then that span, whatever the weights
// and the last basis, so one iteration from any start lands on it. Cholesky QR in double: with
// K = V_T V_T^T = L L^T, Q = V_T^T L^-T, and the rows' coordinates in that basis are L itself
// (V_T Q = L), so Pt_ needs no product either. It is the Gram-Schmidt basis of the rows in their
// order, computed from one t x t Gram matrix instead of t dependent column steps. Two guards:
//   - a row with no direction of its own (a pivot under kDependent of its squared length, about
//     where the pivot's rounding lies: the same value as an earlier heavy row) is replaced, inside
//     the factorization, by the coordinate axis the basis so far covers least, as the Gram-Schmidt
//     replaces a column with nothing left (its own threshold is 1e-14 of the column's squared
//     length, below what a Cholesky pivot resolves); the basis is then not exactly the rows'
//     span, so Pt_ is left to the caller's product and the seed takes its general path;
//   - Cholesky QR loses orthogonality as cond(V_T)^2, so a row that keeps under kKeep of its
//     squared length outside the rows before it, but more than kDependent, sends the rows through
//     orthonormalize() instead.
// Returns true when Q_ is the rows' span and Pt_ = L (no replacement, no fallback).
bool HeavyLeverage::span_basis(int64_t D, int64_t r) {
  constexpr double kKeep = 1e-6;        // squared: a residual under 1e-3 of the row's length
  constexpr double kDependent = 1e-13;  // ... and under ~3e-7 of it: no direction of its own
  const int64_t t = Vt_.rows();
  const int64_t ld = Q_.cols();
  const int64_t tp = (t + 7) / 8 * 8;  // rows padded to whole groups of eight
  const int64_t G = (D + 7) / 8;       // groups of eight doubles per row
  // the rows in double, each padded with zeros to G groups
  qc_.resize(static_cast<size_t>(t * G));
  for (int64_t j = 0; j < t; ++j) {
    const float* v = Vt_.data() + j * D;
    Lanes8* x = qc_.data() + j * G;
    int64_t g = 0;
    for (; 8 * g + 8 <= D; ++g) {
      Floats8 f;
      std::memcpy(&f, v + 8 * g, sizeof f);
      x[g] = __builtin_convertvector(f, Lanes8);
    }
    if (g < G) {
      x[g] = Lanes8{};
      for (int64_t d = 8 * g; d < D; ++d) x[g][d - 8 * g] = static_cast<double>(v[d]);
    }
  }
  const auto* xr = reinterpret_cast<const double*>(qc_.data());
  // and transposed (D x tp) for the Gram matrix
  xt_.resize(static_cast<size_t>(D * tp));
  transpose_blocks(xr, t, 8 * G, D, xt_.data(), tp, tp);
  // K's lower blocks, each entry one chain over d ascending, then the upper ones by transposing
  gram_.resize(static_cast<size_t>(tp * tp / 8));
  double* A = reinterpret_cast<double*>(gram_.data());  // K, tp x tp
  for (int64_t bi = 0; bi < tp; bi += 8)
    for (int64_t bj = 0; bj <= bi; bj += 8) {
      Lanes8 acc[8] = {};
      for (int64_t d = 0; d < D; ++d) {
        Lanes8 cj;
        std::memcpy(&cj, xt_.data() + d * tp + bj, sizeof cj);
        const double* ci = xt_.data() + d * tp + bi;
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) acc[k] += ci[k] * cj;
      }
      for (int k = 0; k < 8; ++k) std::memcpy(A + (bi + k) * tp + bj, &acc[k], sizeof acc[k]);
      if (bj < bi) {
        transpose8(acc);
        for (int k = 0; k < 8; ++k) std::memcpy(A + (bj + k) * tp + bi, &acc[k], sizeof acc[k]);
      }
    }
  // K = L L^T, right-looking: step k takes row k of the trailing block (its column k, by
  // symmetry) times its pivot's reciprocal from every later row, so a step is t - k independent
  // row updates with one division on the chain between steps (the square roots come after).
  // Every pivot is checked against its row's squared length.
  xlen_.resize(static_cast<size_t>(t));
  for (int64_t j = 0; j < t; ++j) xlen_[static_cast<size_t>(j)] = A[j * tp + j];
  const int64_t TG = tp / 8;
  lcol_.resize(static_cast<size_t>(tp * tp / 8));
  auto* Lc = reinterpret_cast<double*>(lcol_.data());  // L's columns as rows: [k * tp + j] = L_jk
  for (int64_t k = t; k < tp; ++k)
    for (int64_t j = 0; j < tp; ++j) Lc[k * tp + j] = 0.0;
  // Q's columns: q_j = (x_j - sum_{k<j} L_jk q_k) / L_jj, in place over rows [from, to); each
  // group of eight entries one chain over k, the groups independent
  int64_t solved = 0;
  const auto solve = [&](int64_t to) {
    with_head_dim(D, [&](auto dc) {
      constexpr int KC = decltype(dc)::value / 8;
      solve_rows<KC>(qc_.data(), solved, to, static_cast<int>(G), Lc, tp);
    });
    solved = to;
  };
  int64_t replaced = 0;  // rows replaced by an axis (counted when the basis stands)
  for (int64_t k = 0; k < t; ++k) {
    double p = A[k * tp + k];
    if (!(p > kDependent * xlen_[static_cast<size_t>(k)]) && std::isfinite(p)) {
      // Row k adds no direction of its own (the same value as an earlier heavy row, say): like
      // Gram-Schmidt, take the coordinate axis the basis so far covers least in its place. Its
      // coordinates on q_0..q_{k-1} are their entries at the axis, and its row of the trailing
      // block is K's row for the axis (1 on the diagonal, the rows' entries at the axis after
      // it) less the first k steps' updates.
      solve(k);
      // (cover_ holds doubles, aligned for a double only: its groups go through memcpy on a
      // double pointer, never a Lanes8 one, whose type promises 64-byte alignment)
      cover_.assign(static_cast<size_t>(8 * G), 0.0);
      double* cov = cover_.data();
      for (int64_t m = 0; m < k; ++m)
        for (int64_t g = 0; g < G; ++g) {
          const Lanes8 x = qc_[static_cast<size_t>(m * G + g)];
          Lanes8 c;
          std::memcpy(&c, cov + 8 * g, sizeof c);
          c += x * x;
          std::memcpy(cov + 8 * g, &c, sizeof c);
        }
      const int64_t axis = GramSchmidt<0>::least_covered(cover_.data(), D);
      for (int64_t m = 0; m < k; ++m) Lc[m * tp + k] = xr[m * 8 * G + axis];
      for (int64_t j = k; j < t; ++j) {
        double v = j == k ? 1.0 : xr[j * 8 * G + axis];
        for (int64_t m = 0; m < k; ++m) v -= Lc[m * tp + k] * Lc[m * tp + j];
        A[k * tp + j] = v;
      }
      for (int64_t g = 0; g < G; ++g) qc_[static_cast<size_t>(k * G + g)] = Lanes8{};
      qc_[static_cast<size_t>(k * G + axis / 8)][axis % 8] = 1.0;
      xlen_[static_cast<size_t>(k)] = 1.0;
      p = A[k * tp + k];
      ++replaced;
    }
    if (!(p > kKeep * xlen_[static_cast<size_t>(k)]) || !std::isfinite(p)) {
      Y_.setZero(D, ld);
      for (int64_t i = 0; i < t; ++i)
        for (int64_t d = 0; d < D; ++d) Y_(d, i) = Vt_(i, d);
      orthonormalize(D, r);
      ++span_fallbacks_;
      return false;
    }
    const double inv = 1.0 / p;
    const auto* ak = reinterpret_cast<const Lanes8*>(A + k * tp);
    for (int64_t j = k + 1; j < t; ++j) {
      auto* aj = reinterpret_cast<Lanes8*>(A + j * tp);
      const double f = A[k * tp + j] * inv;
      for (int64_t g = 0; g < TG; ++g) aj[g] -= f * ak[g];
    }
    // L's column k: row k's entries from k on over the square root of its pivot
    const double sc = 1.0 / std::sqrt(p);
    for (int64_t j = 0; j < tp; ++j) Lc[k * tp + j] = j < k ? 0.0 : A[k * tp + j] * sc;
  }
  solve(t);
  span_axes_ += replaced;
  // Q_ (D x ld) holds the columns q_j; Pt_ (t x ld) = L unless a row was replaced (then the
  // heavy rows' own coordinates come from the caller's product, and the seed takes the general
  // path: the replaced row is only nearly inside the basis)
  transpose_blocks(xr, t, 8 * G, D, Q_.data(), ld, ld);
  if (replaced > 0) return false;
  Pt_.resize(t, ld);
  transpose_blocks(Lc, t, tp, t, Pt_.data(), ld, ld);
  return true;
}

void HeavyLeverage::score(const store::RowSource& V, const double* a, int64_t n, int64_t rank_cap,
                          double* out) {
  const int64_t D = V.dim();
  n_ = n;
  t_ = 0;
  E_ = 0;
  ready_ = false;
  span_ = false;
  if (n <= 0) return;
  ensure_slots(n);
  row_.resize(D);
  // the slots whose cache may be stale: reported changes, slots never seen, or all of them
  if (all_dirty_) {
    std::fill(state_.begin(), state_.end(), kNothing);
    dirty_.clear();
    for (int64_t i = 0; i < n; ++i) dirty_.push_back(i);
    all_dirty_ = false;
  } else {
    for (int64_t i = seen_; i < n; ++i) dirty_.push_back(i);
  }
  seen_ = std::max(seen_, n);
  for (const int64_t i : dirty_) {
    if (i >= n || state_[static_cast<size_t>(i)] != kNothing) continue;
    V.read(i, 1, row_.data());
    vn_[static_cast<size_t>(i)] = row_.squaredNorm();
    state_[static_cast<size_t>(i)] = kNorm;
  }
  // E and the heaviest row in four interleaved partial results (a fixed order, so the same bits
  // on every run; one serial chain of n dependent adds would be several times slower)
  e_.resize(static_cast<size_t>(n));
  double part[4] = {0, 0, 0, 0}, top[4] = {0, 0, 0, 0};
  const float* vn = vn_.data();
  double* ev = e_.data();
  int64_t i0 = 0;
  for (; i0 + 4 <= n; i0 += 4)
    for (int j = 0; j < 4; ++j) {
      const double e = a[i0 + j] * a[i0 + j] * static_cast<double>(vn[i0 + j]);
      ev[i0 + j] = e;
      part[j] += e;
      top[j] = std::max(top[j], e);
    }
  for (int j = 0; i0 + j < n; ++j) {
    const double e = a[i0 + j] * a[i0 + j] * static_cast<double>(vn[i0 + j]);
    ev[i0 + j] = e;
    part[j] += e;
    top[j] = std::max(top[j], e);
  }
  E_ = (part[0] + part[1]) + (part[2] + part[3]);
  const double heaviest = std::max(std::max(top[0], top[1]), std::max(top[2], top[3]));
  Eigen::Map<Eigen::VectorXd> l(out, n);
  if (!(E_ > 0)) {
    l.setZero();
    return;
  }
  const int64_t rank = std::min<int64_t>({rank_cap, n, D});
  const bool closed = rank == std::min(n, D);
  if (closed) {  // every direction kept: ||w_i||^2 / ||W||_F^2
    for (int64_t i = 0; i < n; ++i) l(i) = e_[static_cast<size_t>(i)] / E_;
    // the enlarged block may still need a subspace (n == rank_cap < D): then the basis spans
    // every row, from an exact eigensolve below
    if (std::min<int64_t>({rank_cap, n + 1, D}) == std::min(n + 1, D)) return;
  }
  select_heavy(n, closed ? n : rank, heaviest);
  const auto t = static_cast<int64_t>(T_.size());
  Vt_.resize(t, D);
  at_.resize(t);
  for (int64_t j = 0; j < t; ++j) {
    V.read(T_[static_cast<size_t>(j)], 1, Vt_.data() + j * D);
    at_(j) = static_cast<float>(a[T_[static_cast<size_t>(j)]]);
  }
  const int64_t ld = padded(rank);
  Pt_.resize(t, ld);
  bool have_pt = false;  // Pt_ = V_T Q already
  if (closed || Q_.rows() != D || r_ != rank) {
    // cold start: the exact top eigenspace of the heavy rows' Gram matrix, once
    const Eigen::MatrixXd W = (at_.asDiagonal() * Vt_).cast<double>();
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(W.transpose() * W);
    Q_.setZero(D, ld);
    Q_.leftCols(rank) = es.eigenvectors().rightCols(rank).rowwise().reverse().cast<float>();
    r_ = rank;
    ++cold_;
    since_ = 0;
  } else if (++since_ >= lim_.refresh) {
    since_ = 0;
    ++iters_;
    // t == r: the heavy rows' own span (span_basis); more rows: one warm-started iteration,
    // Q <- orth(V_T^T diag(a_T^2) V_T Q)
    if (t <= rank) {
      have_pt = span_basis(D, rank);
      span_ = have_pt;
    } else {
      times_basis(Vt_.data(), t, D, Q_.data(), ld, Pt_.data());
      for (int64_t j = 0; j < t; ++j) Pt_.row(j) *= at_(j) * at_(j);
      VtT_ = Vt_.transpose();
      Y_.resize(D, ld);
      times_basis(VtT_.data(), D, t, Pt_.data(), ld, Y_.data());
      // orthonormalized in double: the heavy rows' Gram matrix often spans more orders of
      // magnitude than fp32 Gram-Schmidt can separate
      orthonormalize(D, rank);
    }
  }
  // the heavy rows against the new basis (also the seed's input)
  if (!have_pt) times_basis(Vt_.data(), t, D, Q_.data(), ld, Pt_.data());
  for (int64_t j = 0; j < t; ++j) {
    const auto i = static_cast<size_t>(T_[static_cast<size_t>(j)]);
    vn_[i] = Vt_.row(j).squaredNorm();
    qn_[i] = Pt_.row(j).squaredNorm();
    state_[i] = kProjected;
  }
  // rows to (re)project: a few light rows per call, round robin, and every row without one
  redo_.clear();
  if (lim_.sweep > 0) {
    const int64_t m = std::min(n, (n + lim_.sweep - 1) / lim_.sweep);
    for (int64_t s = 0; s < m; ++s) {
      const int64_t i = (cursor_ + s) % n;
      if (state_[static_cast<size_t>(i)] == kProjected) redo_.push_back(i);
    }
    cursor_ = (cursor_ + m) % n;
  }
  for (const int64_t i : dirty_) {
    if (i >= n || state_[static_cast<size_t>(i)] == kProjected ||
        state_[static_cast<size_t>(i)] == kQueued)
      continue;
    state_[static_cast<size_t>(i)] = kQueued;  // listed once even if reported twice
    redo_.push_back(i);
  }
  dirty_.clear();
  project_rows(V, redo_);
  if (!closed) {
    const double inv = 1.0 / E_;
    for (int64_t i = 0; i < n; ++i)
      l(i) = a[i] * a[i] * static_cast<double>(qn_[static_cast<size_t>(i)]) * inv;
  }
  t_ = t;
  ready_ = true;
}

double HeavyLeverage::seed_scaled(double c, const double* w_new, int64_t D, int64_t rank_cap) {
  const double c2 = c * c;
  return seed([&](int64_t j) { return static_cast<float>(c) * at_(j); }, c2 * E_, w_new, D,
              rank_cap);
}

double HeavyLeverage::seed_reweighted(const double* b, const double* w_new, int64_t D,
                                      int64_t rank_cap) {
  double energy = 0;
  for (int64_t i = 0; i < n_; ++i)
    energy += b[i] * b[i] * static_cast<double>(vn_[static_cast<size_t>(i)]);
  return seed([&](int64_t j) { return static_cast<float>(b[T_[static_cast<size_t>(j)]]); }, energy,
              w_new, D, rank_cap);
}

// Rayleigh-Ritz of G' = W_T'^T W_T' + w w^T (W_T' the heavy rows under their new weights) on
// B = [Q, u], u the unit part of w outside span(Q); the newcomer's leverage is the energy of
// B^T w in the top r Ritz directions over the enlarged block's whole energy.
template <typename Weight>
double HeavyLeverage::seed(Weight b, double energy, const double* w_new, int64_t D,
                           int64_t rank_cap) {
  const Eigen::Map<const Eigen::VectorXd> wd(w_new, D);
  const double wn2 = wd.squaredNorm();
  const double total = energy + wn2;
  if (!(total > 0)) return 0.0;
  const int64_t n = n_;
  // every direction of the enlarged block kept, or no energy in the old rows to compete with
  if (std::min<int64_t>({rank_cap, n + 1, D}) == std::min(n + 1, D) || !ready_) return wn2 / total;
  const int64_t r = r_, ld = Q_.cols();
  const auto t = static_cast<int64_t>(T_.size());
  Pb_.resize(t, ld);
  for (int64_t j = 0; j < t; ++j) Pb_.row(j) = b(j) * Pt_.row(j);
  PbT_ = Pb_.transpose();
  Ab_.resize(ld, ld);
  times_basis(PbT_.data(), r, t, Pb_.data(), ld, Ab_.data());
  Eigen::MatrixXd& Tm = Tm_;
  Eigen::VectorXd& wb = wb_;
  int64_t m = r;
  if (span_) {
    // The basis is the heavy rows' Gram-Schmidt basis, its columns in double in qc_: w's
    // coordinates in it, and the squared length of w's part u outside it by difference (no u).
    // The heavy rows lie inside the basis, so their projections on u are zero: the Ritz matrix's
    // border is zero and only w reaches the extra direction.
    const int64_t G = (D + 7) / 8;
    wpad_.assign(static_cast<size_t>(G), Lanes8{});
    std::memcpy(wpad_.data(), w_new, static_cast<size_t>(D) * sizeof(double));
    wb.resize(r + 1);
    const GramSchmidt<0> gs{static_cast<int>(G)};  // its dot product over padded groups
    for (int64_t j = 0; j < r; ++j) wb(j) = gs.dot(qc_.data() + j * G, wpad_.data());
    const double un2 = wn2 - wb.head(r).squaredNorm();
    m = un2 > 1e-12 * wn2 ? r + 1 : r;  // u longer than 1e-6 of w
    Tm.setZero(m, m);
    Tm.topLeftCorner(r, r) = Ab_.topLeftCorner(r, r).cast<double>();
    wb.conservativeResize(m);
    if (m > r) wb(r) = std::sqrt(un2);
  } else {
    w_ = wd.cast<float>();
    wq_.resize(ld);
    times_basis(w_.data(), 1, D, Q_.data(), ld, wq_.data());
    u_.resize(D);
    for (int64_t d = 0; d < D; ++d) {
      float s = 0;
      for (int64_t c = 0; c < ld; ++c) s += Q_(d, c) * wq_(c);
      u_(d) = w_(d) - s;
    }
    const float un = u_.norm();
    const bool extend = un > 1e-6f * std::sqrt(static_cast<float>(wn2));
    m = r + (extend ? 1 : 0);
    Tm.resize(m, m);
    Tm.topLeftCorner(r, r) = Ab_.topLeftCorner(r, r).cast<double>();
    wb.resize(m);
    wb.head(r) = wq_.head(r).cast<double>();
    if (extend) {
      u_ /= un;
      vu_.resize(t);
      for (int64_t j = 0; j < t; ++j) vu_(j) = b(j) * Vt_.row(j).dot(u_.transpose());
      wq_.setZero();  // reused: Pb^T vu
      times_basis(vu_.data(), 1, t, Pb_.data(), ld, wq_.data());
      Tm.topRightCorner(r, 1) = wq_.head(r).cast<double>();
      Tm.bottomLeftCorner(1, r) = Tm.topRightCorner(r, 1).transpose();
      Tm(r, r) = static_cast<double>(vu_.squaredNorm());
      wb(r) = static_cast<double>(w_.dot(u_));
    }
  }
  Tm.noalias() += wb * wb.transpose();
  if (m <= r) return wb.squaredNorm() / total;  // nothing to drop
  constexpr double kTol = 1e-6;
  // Tm = M + wb wb^T with M a Gram matrix, so z^T Tm z >= (wb . z)^2 for the unit eigenvector z
  // of Tm's smallest eigenvalue: when that eigenvalue is below kTol ||Tm||, the newcomer's energy
  // outside the kept directions is below it too, and all of ||wb||^2 is kept to that tolerance
  // (energy_outside_smallest narrows the eigenvalue to a width of the same order). When the heavy
  // rows span fewer than r directions, Tm (rank at most that count + 1) is singular up to
  // rounding, so this usually applies.
  if (smallest_below(Tm, kTol)) {
    ++near_null_;
    return wb.squaredNorm() / total;
  }
  double kept = 0;
  if (energy_outside_smallest(Tm, wb, kept, kTol)) return kept / total;
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(Tm);
  return (wb.transpose() * es.eigenvectors().rightCols(r)).squaredNorm() / total;
}

int64_t HeavyLeverage::bytes() const {
  const auto v = [](const auto& x) {
    return static_cast<int64_t>(x.capacity() *
                                sizeof(typename std::decay_t<decltype(x)>::value_type));
  };
  const auto e = [](const auto& x) {
    return static_cast<int64_t>(x.size()) * static_cast<int64_t>(sizeof(float));
  };
  return v(vn_) + v(qn_) + v(state_) + v(e_) + v(cand_) + v(T_) + v(redo_) + v(dirty_) + v(bin_) +
         v(qc_) + v(cover_) + static_cast<int64_t>((Tm_.size() + wb_.size()) * sizeof(double)) +
         v(xt_) + v(xlen_) + v(gram_) + v(lcol_) + v(wpad_) + e(Vt_) + e(VtT_) + e(Pt_) + e(Vr_) +
         e(Pr_) + e(Q_) + e(Y_) + e(Pb_) + e(PbT_) + e(Ab_) + e(at_) + e(row_) + e(u_) + e(vu_) +
         e(w_) + e(wq_);
}

}  // namespace vq::eviction

#include "coding/bit_allocation.hpp"

#include <algorithm>
#include <cmath>

#include "coding/quantizer.hpp"
#include "veloxquant/errors.hpp"

namespace vq::coding {

namespace {

/// Two distortion totals within this fraction of the total variance count as equal. It absorbs
/// the rounding of sums taken in different orders, and makes bits that would buy less than that
/// (numerically-zero components) count as buying nothing. Proportional to the variances, so ties
/// are broken the same way at every scale.
constexpr double kTieTolerance = 1e-12;

void check_common(int64_t budget, double beta) {
  VQ_CHECK(budget >= 0, InvalidArgument, "bit allocation: budget = ", budget, " must be >= 0");
  VQ_CHECK(std::isfinite(beta) && beta > 1.0, InvalidArgument, "bit allocation: beta = ", beta,
           " must be a finite number > 1");
}

}  // namespace

double model_distortion(double variance, int bits, double beta) {
  return std::max(variance, 0.0) * std::pow(beta, -static_cast<double>(bits));
}

double total_distortion(const std::vector<double>& variances, const std::vector<int>& bits,
                        double beta) {
  double s = 0;
  for (size_t i = 0; i < variances.size(); ++i) s += model_distortion(variances[i], bits[i], beta);
  return s;
}

std::vector<int> normalize_bit_choices(const std::vector<int64_t>& choices) {
  VQ_CHECK(!choices.empty(), InvalidArgument,
           "bit_choices is empty; give at least 0 and one width");
  std::vector<int> out;
  for (int64_t c : choices) {
    VQ_CHECK(c >= 0 && c <= kMaxQuantBits, InvalidArgument, "bit_choices: width ", c,
             " is out of range; allowed [0, ", kMaxQuantBits, "]");
    out.push_back(static_cast<int>(c));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  VQ_CHECK(out.front() == 0, InvalidArgument,
           "bit_choices must contain 0 (a dropped component), so that every budget is feasible; "
           "smallest given is ",
           out.front());
  return out;
}

namespace {

// The exact backward DP shared by both allocators: row i holds the best (distortion, bits used)
// of components i..n-1 with at most c bits; choice[i][c] is the width component i takes in that
// optimum. cost(i, b) is component i's distortion at b bits; tol the tie tolerance.
template <typename Cost>
std::vector<int> dp_core(int64_t n, int64_t budget, const std::vector<int>& choices, double tol,
                         Cost&& cost_of) {
  if (n == 0) return {};
  const int64_t cap = std::min<int64_t>(budget, n * choices.back());  // more can never be spent
  const size_t W = static_cast<size_t>(cap + 1);
  std::vector<double> next_cost(W, 0.0), cur_cost(W);
  std::vector<int64_t> next_bits(W, 0), cur_bits(W);
  std::vector<uint8_t> choice(static_cast<size_t>(n) * W);
  // Widest first, so that among exact ties the lowest index keeps the extra bits.
  const std::vector<int> widths(choices.rbegin(), choices.rend());
  std::vector<uint8_t> has(W);  // cur_* holds a candidate for this c
  // For each component the widths are tried in the same order for every c as a per-c loop would
  // (widest first), but with c innermost: each width's pass over the budgets is a straight run of
  // independent lanes (vectorizable), and each c sees the same comparisons in the same order.
  for (int64_t i = n - 1; i >= 0; --i) {
    uint8_t* ch = choice.data() + static_cast<size_t>(i) * W;
    std::fill(has.begin(), has.end(), uint8_t{0});
    for (const int b : widths) {
      if (b > cap) continue;
      const double own = cost_of(i, b);
      const double* nc = next_cost.data();
      const int64_t* nb = next_bits.data();
      double* cc = cur_cost.data();
      int64_t* cb = cur_bits.data();
      uint8_t* h = has.data();
      for (size_t c = static_cast<size_t>(b); c < W; ++c) {
        const double cost = own + nc[c - static_cast<size_t>(b)];
        const int64_t bits = b + nb[c - static_cast<size_t>(b)];
        const bool tie = std::abs(cost - cc[c]) <= tol;
        const bool better = !h[c] || (tie ? bits < cb[c] : cost < cc[c]);
        cc[c] = better ? cost : cc[c];
        cb[c] = better ? bits : cb[c];
        ch[c] = better ? static_cast<uint8_t>(b) : ch[c];
        h[c] = 1;
      }
    }
    std::swap(cur_cost, next_cost);
    std::swap(cur_bits, next_bits);
  }
  std::vector<int> bits(static_cast<size_t>(n));
  int64_t c = cap;
  for (int64_t i = 0; i < n; ++i) {
    const int b = choice[static_cast<size_t>(i) * W + static_cast<size_t>(c)];
    bits[static_cast<size_t>(i)] = b;
    c -= b;
  }
  return bits;
}

}  // namespace

std::vector<int> dp_allocate_bits(const std::vector<double>& variances, int64_t budget,
                                  const std::vector<int>& choices, double beta) {
  check_common(budget, beta);
  VQ_CHECK(!choices.empty() && choices.front() == 0, InvalidArgument,
           "dp_allocate_bits: choices must be sorted and start with 0");
  const int64_t n = static_cast<int64_t>(variances.size());
  double total_variance = 0;
  for (double v : variances) total_variance += std::max(v, 0.0);
  std::vector<double> beta_pow(static_cast<size_t>(choices.back() + 1));
  for (int b = 0; b <= choices.back(); ++b) beta_pow[static_cast<size_t>(b)] = std::pow(beta, -b);
  return dp_core(n, budget, choices, kTieTolerance * total_variance, [&](int64_t i, int b) {
    return std::max(variances[static_cast<size_t>(i)], 0.0) * beta_pow[static_cast<size_t>(b)];
  });
}

std::vector<int> dp_allocate_bits_table(const std::vector<double>& dist, int64_t stride,
                                        int64_t budget, const std::vector<int>& choices) {
  VQ_CHECK(budget >= 0, InvalidArgument, "bit allocation: budget = ", budget, " must be >= 0");
  VQ_CHECK(!choices.empty() && choices.front() == 0, InvalidArgument,
           "dp_allocate_bits_table: choices must be sorted and start with 0");
  const int max_choice = choices.back();
  VQ_CHECK(stride > max_choice && dist.size() % static_cast<size_t>(stride) == 0, InvalidArgument,
           "dp_allocate_bits_table: stride ", stride, " must exceed the largest choice ",
           max_choice, " and divide the table size ", dist.size());
  for (size_t i = 0; i < dist.size(); ++i)
    VQ_CHECK(std::isfinite(dist[i]) && dist[i] >= 0, InvalidArgument,
             "dp_allocate_bits_table: entry ", i, " = ", dist[i], " must be finite and >= 0");
  const int64_t n = static_cast<int64_t>(dist.size()) / stride;
  double total = 0;  // the b = 0 column: each component's whole error when dropped
  for (int64_t i = 0; i < n; ++i) total += dist[static_cast<size_t>(i * stride)];
  return dp_core(n, budget, choices, kTieTolerance * total,
                 [&](int64_t i, int b) { return dist[static_cast<size_t>(i * stride + b)]; });
}

double table_distortion(const std::vector<double>& dist, int64_t stride,
                        const std::vector<int>& bits) {
  double s = 0;
  for (size_t i = 0; i < bits.size(); ++i)
    s += dist[i * static_cast<size_t>(stride) + static_cast<size_t>(bits[i])];
  return s;
}

std::vector<int> waterfill_allocate_bits(const std::vector<double>& variances, int64_t budget,
                                         const std::vector<int>& choices, double beta) {
  check_common(budget, beta);
  VQ_CHECK(!choices.empty() && choices.front() == 0, InvalidArgument,
           "waterfill_allocate_bits: choices must be sorted and start with 0");
  const size_t n = variances.size();
  std::vector<int> bits(n, 0);
  if (n == 0) return bits;

  // Continuous solution over the components with positive variance.
  double log_sum = 0;
  int64_t n_pos = 0;
  for (double v : variances)
    if (v > 0) {
      log_sum += std::log(v);
      ++n_pos;
    }
  if (n_pos == 0) return bits;
  const double log_gm = log_sum / static_cast<double>(n_pos);
  const double b_avg = static_cast<double>(budget) / static_cast<double>(n_pos);
  const double lo = choices.front(), hi = choices.back();
  // idx[i]: position of bits[i] in `choices`.
  std::vector<size_t> idx(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const double v = variances[i];
    if (!(v > 0)) continue;
    double b = b_avg + (std::log(v) - log_gm) / std::log(beta);
    b = std::min(std::max(b, lo), hi);
    // Nearest allowed width; a tie between two widths takes the lower one.
    size_t best = 0;
    for (size_t k = 1; k < choices.size(); ++k)
      if (std::abs(choices[k] - b) < std::abs(choices[best] - b)) best = k;
    idx[i] = best;
  }
  auto used = [&] {
    int64_t s = 0;
    for (size_t i = 0; i < n; ++i) s += choices[idx[i]];
    return s;
  };
  auto D = [&](size_t i, size_t k) { return model_distortion(variances[i], choices[k], beta); };

  // Over budget: step down where the added distortion per saved bit is smallest.
  int64_t total = used();
  while (total > budget) {
    size_t pick = n;
    double pick_rate = 0;
    for (size_t i = 0; i < n; ++i) {
      if (idx[i] == 0) continue;
      const double rate = (D(i, idx[i] - 1) - D(i, idx[i])) /
                          static_cast<double>(choices[idx[i]] - choices[idx[i] - 1]);
      if (pick == n || rate < pick_rate) {
        pick = i;
        pick_rate = rate;
      }
    }
    total -= choices[idx[pick]] - choices[idx[pick] - 1];
    --idx[pick];
  }
  // Under budget: step up where the gained distortion per spent bit is largest (and positive).
  for (;;) {
    size_t pick = n;
    double pick_rate = 0;
    for (size_t i = 0; i < n; ++i) {
      if (idx[i] + 1 >= choices.size()) continue;
      const int64_t step = choices[idx[i] + 1] - choices[idx[i]];
      if (total + step > budget) continue;
      const double rate = (D(i, idx[i]) - D(i, idx[i] + 1)) / static_cast<double>(step);
      if (rate > 0 && (pick == n || rate > pick_rate)) {
        pick = i;
        pick_rate = rate;
      }
    }
    if (pick == n) break;
    total += choices[idx[pick] + 1] - choices[idx[pick]];
    ++idx[pick];
  }
  for (size_t i = 0; i < n; ++i) bits[i] = choices[idx[i]];
  return bits;
}

std::vector<int> uniform_allocate_bits(int64_t n, int64_t budget, int max_bits) {
  VQ_CHECK(n >= 0 && budget >= 0, InvalidArgument, "uniform allocation: n = ", n,
           ", budget = ", budget, " must both be >= 0");
  std::vector<int> bits(static_cast<size_t>(n), 0);
  if (n == 0) return bits;
  const int64_t q = budget / n, rem = budget % n;
  for (int64_t i = 0; i < n; ++i)
    bits[static_cast<size_t>(i)] =
        static_cast<int>(std::min<int64_t>(q + (i < rem ? 1 : 0), max_bits));
  return bits;
}

std::vector<int> split_allocate_bits(int64_t n, int64_t budget, int max_bits) {
  VQ_CHECK(n >= 0 && budget >= 0, InvalidArgument, "split allocation: n = ", n,
           ", budget = ", budget, " must both be >= 0");
  std::vector<int> bits(static_cast<size_t>(n), 0);
  if (n == 0) return bits;
  const int64_t n_hi = std::max<int64_t>(1, n / 4);
  const int64_t lo = std::min<int64_t>(budget / (n + n_hi), max_bits / 2);
  for (int64_t i = 0; i < n; ++i)
    bits[static_cast<size_t>(i)] = static_cast<int>(i < n_hi ? 2 * lo : lo);
  return bits;
}

}  // namespace vq::coding

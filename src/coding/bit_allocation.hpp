// Integer bit allocation across principal components under a total bit budget (bits per token).
//
// Distortion model (the spec's analytic proxy): D(v, b) = v * beta^(-b), so D(v, 0) = v (a dropped
// component costs its whole variance). Every allocator here returns one bit width per component,
// never spends more than the budget, and is deterministic.
//
//   dp_allocate_bits         exact minimum of sum D(v_i, b_i) subject to sum b_i <= budget,
//                            b_i in bit_choices (dynamic programming over the budget)
//   waterfill_allocate_bits  the continuous closed form b_i = b_avg + log(v_i / gmean) / log(beta),
//                            snapped to bit_choices and rebalanced to the budget
//   uniform_allocate_bits    divmod(budget, n): q bits each, q + 1 for the first budget mod n
//   split_allocate_bits      SVDq's fixed split: top 25% (>= 1) get 2 * lo bits, the rest lo
#pragma once

#include <cstdint>
#include <vector>

namespace vq::coding {

/// v * beta^(-bits).
double model_distortion(double variance, int bits, double beta);
/// sum_i model_distortion(v[i], bits[i], beta).
double total_distortion(const std::vector<double>& variances, const std::vector<int>& bits,
                        double beta);

/// Sorted, de-duplicated copy of `choices`; throws InvalidArgument when empty, when a value is
/// outside [0, 8], or when 0 is missing (0 must be allowed so that every budget is feasible).
std::vector<int> normalize_bit_choices(const std::vector<int64_t>& choices);

/// Exact DP allocation. variances: n >= 0 values (negatives are treated as 0); budget >= 0 bits;
/// choices as accepted by normalize_bit_choices; beta > 1.
///
/// Exact up to 1e-12 of the total variance: allocations whose distortions differ by less than
/// that count as tied (this absorbs the rounding of sums taken in different orders). Ties are
/// broken the same way at every scale of the variances: first the allocation that uses fewer bits
/// in total (so bits that buy nothing, e.g. on a numerically-zero component, are not spent), then
/// the one that gives more bits to the lowest index. With equal variances and contiguous choices
/// 0..k the result is floor(B/n) bits each plus one extra bit for the first B mod n components
/// (capped at k). Cost O(n * min(budget, n * max_choice) * |choices|) time, O(n * budget) memory.
std::vector<int> dp_allocate_bits(const std::vector<double>& variances, int64_t budget,
                                  const std::vector<int>& choices, double beta);

/// The same exact DP over an arbitrary distortion table: dist[i * stride + b] is component i's
/// distortion at b bits (b = 0..max choice; stride > max choice; finite, >= 0), n = dist.size() /
/// stride components. The tie tolerance is 1e-12 of sum_i dist[i][0] (the total variance for an
/// analytic table) and ties are broken as in dp_allocate_bits, so with the table
/// v_i * beta^-b the result equals dp_allocate_bits(v, budget, choices, beta). The table need
/// not decrease with b (a measured 1-bit error can exceed the dropped one): the DP takes whatever
/// width is cheapest.
std::vector<int> dp_allocate_bits_table(const std::vector<double>& dist, int64_t stride,
                                        int64_t budget, const std::vector<int>& choices);
/// sum_i dist[i * stride + bits[i]].
double table_distortion(const std::vector<double>& dist, int64_t stride,
                        const std::vector<int>& bits);

/// Continuous water-filling snapped to `choices` and rebalanced: while over budget, the component
/// whose step down to the next lower choice adds the least distortion per bit saved steps down;
/// then, while bits remain, the component whose step up gains the most distortion per bit spent
/// (and fits) steps up. Ties go to the lowest index. Zero-variance components get the lowest
/// choice (0).
std::vector<int> waterfill_allocate_bits(const std::vector<double>& variances, int64_t budget,
                                         const std::vector<int>& choices, double beta);

/// divmod(budget, n): q = budget / n bits each and q + 1 for the first budget % n, every width
/// capped at max_bits.
std::vector<int> uniform_allocate_bits(int64_t n, int64_t budget, int max_bits);

/// SVDq's fixed two-tier split: the first n_hi = max(1, n / 4) components get hi = 2 * lo bits, the
/// rest lo, with lo the largest value such that n_hi * hi + (n - n_hi) * lo <= budget and
/// hi <= max_bits.
std::vector<int> split_allocate_bits(int64_t n, int64_t budget, int max_bits);

}  // namespace vq::coding

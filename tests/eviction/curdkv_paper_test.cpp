// curdkv_paper at decode: the held set is re-scored by the paper's formula at every eviction.
// The cache keeps each row's energy per slot and the slots' position order between steps; its
// decisions must be the ones the formula gives when recomputed from scratch on the held set.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "eviction/family_util.hpp"
#include "test_util.hpp"
#include "veloxquant/tensor.hpp"

namespace {

using famtest::Vec;

// Round every entry to fp16 so that the energies the cache computes from its stored rows are
// exactly those of the input.
vq::Tensor fp16_exact(vq::Tensor t) {
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = vq::round_to_fp16(t.data()[i]);
  return t;
}

Vec paper_scores(const vq::Tensor& K, const vq::Tensor& V, int64_t h,
                 const std::vector<int64_t>& held, const std::string& leverage, int64_t window,
                 int64_t n_sink) {
  const size_t n = held.size();
  Vec k2(n), v2(n), out(n);
  for (size_t i = 0; i < n; ++i) {
    double a = 0, b = 0;
    for (int64_t d = 0; d < K.D(); ++d) {
      a += static_cast<double>(K.at(0, h, held[i], d)) * K.at(0, h, held[i], d);
      b += static_cast<double>(V.at(0, h, held[i], d)) * V.at(0, h, held[i], d);
    }
    k2[i] = a;
    v2[i] = b;
  }
  for (Vec* x : {&k2, &v2})
    for (size_t b = 0; b < n; b += static_cast<size_t>(window)) {
      const size_t e = std::min(n, b + static_cast<size_t>(window));
      double s = 0;
      for (size_t i = b; i < e; ++i) s += (*x)[i];
      if (s > 0)
        for (size_t i = b; i < e; ++i) (*x)[i] /= s;
    }
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    out[i] = leverage == "key"      ? k2[i]
             : leverage == "value"  ? v2[i]
             : leverage == "kv_avg" ? (k2[i] + v2[i]) / 2
                                    : k2[i] * v2[i];
    total += out[i];
  }
  for (size_t i = 0; i < n; ++i) {
    if (total > 0) out[i] /= total;
    if (held[i] < n_sink) out[i] = 1.0;
  }
  return out;
}

TEST(CurdkvPaper, DecodeMatchesTheFormulaRecomputedOnTheHeldSet) {
  // Checked after every update (a prefill chunk, then single tokens and small chunks), so a
  // slot-bookkeeping slip shows up at the step it happens.
  const int64_t S = 120, D = 8, budget = 12, n_sink = 2, window = 3;
  uint64_t seed = 5;
  for (const std::string leverage : {"kv_product", "kv_avg", "key", "value"}) {
    const auto K = fp16_exact(vqtest::random_tensor(1, 2, S, D, seed++));
    const auto V = fp16_exact(vqtest::random_tensor(1, 2, S, D, seed++));
    auto cache = vq::make_cache("curdkv_paper:budget=12,n_sink=2,window=3,leverage=" + leverage, D);
    const std::vector<int64_t> chunks = {20, 1, 1, 3, 1};
    int64_t s = 0;
    for (size_t c = 0; s < S; ++c) {
      const int64_t m = std::min<int64_t>(chunks[c % chunks.size()], S - s);
      cache->update(K.slice_tokens(s, m), V.slice_tokens(s, m));
      s += m;
      for (int64_t h = 0; h < 2; ++h) {
        const auto want = famtest::simulate(s, budget, n_sink, [&](const auto& held, int64_t) {
          return paper_scores(K, V, h, held, leverage, window, n_sink);
        });
        ASSERT_EQ(famtest::kept(*cache, 0, h), want)
            << leverage << " head " << h << " after " << s << " tokens";
      }
    }
  }
}

}  // namespace

// The blocked Gram kernel (coding/gram.hpp) against its scalar reference: the same lower
// triangle, bit for bit, for every shape (row and column edges, panels of rows with a tail) and
// for values of very different magnitudes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "coding/gram.hpp"
#include "core/rng.hpp"

namespace vq::coding {
namespace {

// Count of lower-triangle entries whose bits differ between the kernel and the reference.
int64_t differing(const std::vector<float>& X, int64_t n, int64_t D) {
  std::vector<float> fast(static_cast<size_t>(D * D), -7.0f), ref(fast.size(), 3.0f);
  gram_lower(X.data(), n, D, fast.data());
  gram_lower_ref(X.data(), n, D, ref.data());
  int64_t bad = 0;
  for (int64_t i = 0; i < D; ++i)
    for (int64_t j = 0; j <= i; ++j)
      bad += std::memcmp(&fast[static_cast<size_t>(i * D + j)],
                         &ref[static_cast<size_t>(i * D + j)], 4) != 0
                 ? 1
                 : 0;
  return bad;
}

TEST(CodingGram, BlockedGramEqualsTheReferenceOnEveryShape) {
  Rng rng(31);
  int cases = 0;
  for (int64_t D : {1, 5, 6, 8, 15, 16, 17, 31, 32, 33, 48, 64, 80, 100, 128, 129}) {
    for (int64_t n : {1, 7, 63, 64, 65, 200, 256}) {
      std::vector<float> X(static_cast<size_t>(n * D));
      for (auto& v : X) v = static_cast<float>(rng.normal());
      EXPECT_EQ(differing(X, n, D), 0) << "n " << n << " D " << D;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 16 * 7);
}

TEST(CodingGram, MixedMagnitudesStayBitIdentical) {
  // Columns spanning 2^-40 .. 2^40, so that the products round differently per entry.
  Rng rng(37);
  const int64_t n = 130, D = 72;
  std::vector<float> X(static_cast<size_t>(n * D));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < D; ++d)
      X[static_cast<size_t>(t * D + d)] =
          static_cast<float>(rng.normal()) * std::ldexp(1.0f, static_cast<int>(d % 81) - 40);
  EXPECT_EQ(differing(X, n, D), 0);
}

TEST(CodingGram, ValuesAreTheSumsOfProducts) {
  // Small integers: every sum is exact, so the kernel must give the exact Gram matrix.
  const int64_t n = 9, D = 40;
  std::vector<float> X(static_cast<size_t>(n * D));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < D; ++d)
      X[static_cast<size_t>(t * D + d)] = static_cast<float>((t + 2 * d) % 7 - 3);
  std::vector<float> G(static_cast<size_t>(D * D));
  gram_lower(X.data(), n, D, G.data());
  for (int64_t i = 0; i < D; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double want = 0;
      for (int64_t t = 0; t < n; ++t)
        want += double(X[static_cast<size_t>(t * D + i)]) * X[static_cast<size_t>(t * D + j)];
      EXPECT_EQ(G[static_cast<size_t>(i * D + j)], static_cast<float>(want)) << i << "," << j;
    }
}

}  // namespace
}  // namespace vq::coding

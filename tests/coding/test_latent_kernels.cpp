// The blocked un-projection kernel (coding/latent_kernels.hpp) against its scalar reference:
// identical floats, bit for bit, for every shape (row and column tails, k = 0 and 1) and for
// adversarial latents (an all-zero component, one repeated value, huge and tiny magnitudes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "coding/latent_kernels.hpp"
#include "core/rng.hpp"

namespace vq::coding {
namespace {

struct Case {
  std::vector<float> lat, basis, mean;
  int64_t k = 0, n = 0, D = 0;
};

Case random_case(Rng& rng, int64_t k, int64_t n, int64_t D) {
  Case c;
  c.k = k;
  c.n = n;
  c.D = D;
  c.lat.resize(static_cast<size_t>(k * n));
  c.basis.resize(static_cast<size_t>(k * D));
  c.mean.resize(static_cast<size_t>(D));
  for (auto& v : c.lat) v = static_cast<float>(rng.normal() * 4.0);
  for (auto& v : c.basis) v = static_cast<float>(rng.normal() * 0.1);
  for (auto& v : c.mean) v = static_cast<float>(rng.normal());
  return c;
}

// Runs both kernels into buffers pre-filled with different garbage; returns the count of values
// whose bits differ (0 = identical), and checks that no byte outside [n, D] is written.
int64_t differing(const Case& c) {
  const size_t sz = static_cast<size_t>(c.n * c.D);
  std::vector<float> fast(sz + 16, -7.0f), ref(sz + 16, 3.0f);
  unproject_rows(c.lat.data(), c.k, c.n, c.basis.data(), c.mean.data(), c.D, fast.data());
  unproject_rows_ref(c.lat.data(), c.k, c.n, c.basis.data(), c.mean.data(), c.D, ref.data());
  for (size_t i = sz; i < sz + 16; ++i) {
    EXPECT_EQ(fast[i], -7.0f) << "fast kernel wrote past the output at " << i;
    EXPECT_EQ(ref[i], 3.0f) << "reference wrote past the output at " << i;
  }
  int64_t bad = 0;
  for (size_t i = 0; i < sz; ++i) bad += std::memcmp(&fast[i], &ref[i], 4) != 0 ? 1 : 0;
  return bad;
}

TEST(CodingLatentKernels, FastUnprojectionEqualsTheReferenceOnEveryShape) {
  Rng rng(11);
  int cases = 0;
  for (int64_t D : {1, 7, 8, 9, 15, 16, 17, 20, 24, 31, 64, 100, 128, 129}) {
    for (int64_t n : {1, 2, 5, 6, 7, 11, 12, 13, 64, 127, 128}) {
      for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{3}, D / 2 + 1, D}) {
        const Case c = random_case(rng, k, n, D);
        EXPECT_EQ(differing(c), 0) << "k " << k << " n " << n << " D " << D;
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 14 * 11 * 5);
}

TEST(CodingLatentKernels, KZeroGivesTheMean) {
  Rng rng(3);
  const Case c = random_case(rng, 0, 13, 40);
  std::vector<float> out(static_cast<size_t>(13 * 40), 5.0f);
  unproject_rows(c.lat.data(), 0, 13, c.basis.data(), c.mean.data(), 40, out.data());
  for (int64_t t = 0; t < 13; ++t)
    for (int64_t d = 0; d < 40; ++d)
      EXPECT_EQ(out[static_cast<size_t>(t * 40 + d)], c.mean[static_cast<size_t>(d)]);
}

TEST(CodingLatentKernels, AdversarialLatentsStayBitIdentical) {
  Rng rng(5);
  const int64_t k = 40, n = 128, D = 128;
  // 0: a component that is zero in every row (a constant chunk quantizes to its min = 0);
  // 1: one value repeated everywhere (a single-symbol stream dequantizes to one latent);
  // 2: latents spanning the fp32 range, so that partial sums cancel and round;
  // 3: subnormal latents and basis entries.
  for (int kind = 0; kind < 4; ++kind) {
    Case c = random_case(rng, k, n, D);
    for (int64_t t = 0; t < n; ++t) {
      if (kind == 0) c.lat[static_cast<size_t>(7 * n + t)] = 0.0f;
      if (kind == 1)
        for (int64_t j = 0; j < k; ++j) c.lat[static_cast<size_t>(j * n + t)] = 1.25f;
      if (kind == 2)
        for (int64_t j = 0; j < k; ++j)
          c.lat[static_cast<size_t>(j * n + t)] =
              static_cast<float>(rng.normal()) * std::ldexp(1.0f, static_cast<int>(j % 60) - 30);
      if (kind == 3)
        for (int64_t j = 0; j < k; ++j)
          c.lat[static_cast<size_t>(j * n + t)] =
              std::numeric_limits<float>::denorm_min() * static_cast<float>(1 + (j + t) % 1000);
    }
    if (kind == 3)
      for (auto& b : c.basis) b *= 1e-30f;
    EXPECT_EQ(differing(c), 0) << "kind " << kind;
  }
}

TEST(CodingLatentKernels, FastProjectionEqualsTheReferenceOnEveryShape) {
  // project_rows runs the un-projection kernel on row-major rows (strided latents): every shape
  // of rows, input width and component count, including the row-block tails.
  Rng rng(41);
  int cases = 0;
  for (int64_t D : {1, 8, 17, 64, 128}) {
    for (int64_t n : {1, 5, 7, 8, 9, 128, 130}) {
      for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{33}, D}) {
        std::vector<float> rows(static_cast<size_t>(n * D)), basisT(static_cast<size_t>(D * k));
        for (auto& v : rows) v = static_cast<float>(rng.normal() * 3.0);
        for (auto& v : basisT) v = static_cast<float>(rng.normal() * 0.2);
        std::vector<float> fast(static_cast<size_t>(n * k) + 8, -7.0f), ref(fast.size(), 3.0f);
        project_rows(rows.data(), n, D, basisT.data(), k, fast.data());
        project_rows_ref(rows.data(), n, D, basisT.data(), k, ref.data());
        int64_t bad = 0;
        for (size_t i = 0; i < static_cast<size_t>(n * k); ++i)
          bad += std::memcmp(&fast[i], &ref[i], 4) != 0 ? 1 : 0;
        EXPECT_EQ(bad, 0) << "n " << n << " D " << D << " k " << k;
        for (size_t i = static_cast<size_t>(n * k); i < fast.size(); ++i)
          EXPECT_EQ(fast[i], -7.0f) << "wrote past the output";
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 5 * 7 * 5);
}

TEST(CodingLatentKernels, ProjectionOfTheBasisRowsIsTheIdentity) {
  // Rows equal to orthonormal basis rows (coordinate axes, exactly representable) project to
  // the unit vectors.
  const int64_t D = 24, k = 24;
  std::vector<float> basisT(static_cast<size_t>(D * k), 0.0f),
      rows(static_cast<size_t>(k * D), 0.0f);
  for (int64_t j = 0; j < k; ++j) {
    basisT[static_cast<size_t>(((j * 5) % D) * k + j)] = 1.0f;  // basis row j = axis 5j mod D
    rows[static_cast<size_t>(j * D + (j * 5) % D)] = 1.0f;
  }
  std::vector<float> lat(static_cast<size_t>(k * k));
  project_rows(rows.data(), k, D, basisT.data(), k, lat.data());
  for (int64_t t = 0; t < k; ++t)
    for (int64_t j = 0; j < k; ++j)
      EXPECT_EQ(lat[static_cast<size_t>(t * k + j)], t == j ? 1.0f : 0.0f) << t << "," << j;
}

}  // namespace
}  // namespace vq::coding

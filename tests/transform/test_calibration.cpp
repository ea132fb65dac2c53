// KVTC calibration (.vqcal) and the kvtc options that use it: file round trip and hostile files,
// the table DP, dp_measured, a cache on a calibrated basis, header/calibration id checks,
// sink/recent rows, pre-RoPE keys through the engine, the calibrate CLI and a held-out
// comparison of calibrated vs local bases on a real model.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include "codecs/pca_codec.hpp"
#include "store/store_util.hpp"

#include <Eigen/Dense>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "../model/model_test_util.hpp"
#include "coding/bit_allocation.hpp"
#include "core/rng.hpp"
#include "eval/fidelity.hpp"
#include "io/vqkv.hpp"
#include "transform/pca_coder.hpp"
#include "transform/transform_cache.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/calibration.hpp"
#include "veloxquant/codec.hpp"
#include "veloxquant/errors.hpp"

namespace vq {
namespace {

using RowMatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// A fixed random orthonormal [D, D] matrix (rows = directions).
RowMatD random_rotation(int64_t D, uint64_t seed) {
  Rng rng(seed);
  Eigen::MatrixXd G(D, D);
  for (int64_t i = 0; i < D; ++i)
    for (int64_t j = 0; j < D; ++j) G(i, j) = rng.normal();
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(G);
  return RowMatD(Eigen::MatrixXd(qr.householderQ()).transpose());
}

/// Rows [n, D] = mu + sum_j z_j * scale_j * Q[j], z ~ N(0, 1), scale_j = 4 / (j + 1).
std::vector<float> rows_in_basis(const RowMatD& Q, int64_t n, uint64_t seed, double mu = 0.5) {
  const int64_t D = Q.rows();
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(n * D));
  for (int64_t t = 0; t < n; ++t) {
    Eigen::RowVectorXd r = Eigen::RowVectorXd::Constant(D, mu);
    for (int64_t j = 0; j < D; ++j) r += rng.normal() * 4.0 / static_cast<double>(j + 1) * Q.row(j);
    for (int64_t d = 0; d < D; ++d)
      x[static_cast<size_t>(t * D + d)] = round_to_fp16(static_cast<float>(r(d)));
  }
  return x;
}

/// A calibration of L layers, H heads, head_dim D, every stream fitted on rows of basis Q.
Calibration synthetic_calibration(int64_t L, int64_t H, int64_t D, const RowMatD& Q, uint64_t seed,
                                  int64_t n = 2000, int64_t chunk = 64) {
  Calibration c;
  c.n_layers = L;
  c.n_kv_heads = H;
  c.head_dim = D;
  c.tokens = n;
  c.chunk_tokens = chunk;
  for (int64_t i = 0; i < L * H * 2; ++i) {
    const auto x = rows_in_basis(Q, n, seed + static_cast<uint64_t>(i));
    c.entries.push_back(fit_calibration_entry(x.data(), n, D, chunk));
  }
  return c;
}

std::string temp_path(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("vq_calib_test_" + std::to_string(::getpid()) + "_" + tag))
      .string();
}

void put_u64_at(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}
/// Rewrite the trailing checksum so that only the field checks can catch an edit.
void reseal(std::vector<uint8_t>& b) {
  put_u64_at(b, b.size() - 8, vqkv::xxh64(b.data(), b.size() - 8));
}

template <typename F>
void expect_format_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no FormatError (expected one mentioning '" << needle << "')";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Calibration, SaveLoadRoundTripIsBitExact) {
  const int64_t D = 6;
  const Calibration c = synthetic_calibration(2, 3, D, random_rotation(D, 1), 10, 500);
  const std::vector<uint8_t> b = c.serialize();
  const Calibration p = Calibration::parse(b.data(), b.size());
  EXPECT_TRUE(p == c);
  EXPECT_EQ(p.serialize(), b);
  EXPECT_EQ(p.id(), c.id());
  EXPECT_EQ(p.verified_id, c.id());  // parse keeps the checksum it verified
  EXPECT_EQ(c.verified_id, 0u);
  const std::string path = temp_path("rt.vqcal");
  c.save(path);
  const Calibration l = Calibration::load(path);
  EXPECT_TRUE(l == c);
  EXPECT_EQ(l.serialize(), b);
  std::filesystem::remove(path);
  // Fitting is deterministic: the same rows give the same bytes (and id).
  EXPECT_EQ(synthetic_calibration(2, 3, D, random_rotation(D, 1), 10, 500).serialize(), b);
}

TEST(Calibration, SaveRefusesWhatLoadWouldRefuse) {
  const int64_t D = 4;
  Calibration c = synthetic_calibration(1, 1, D, random_rotation(D, 2), 10, 300);
  // A range whose quantizer step would overflow to inf (parse bounds every stored float to
  // +-1e30 for this): serialize() writes it, parse() refuses it, so save() must refuse too and
  // leave no file behind.
  c.entries[0].range_lo[1] = -3e38f;
  c.entries[0].range_hi[1] = 3e38f;
  const std::vector<uint8_t> b = c.serialize();
  expect_format_error([&] { (void)Calibration::parse(b.data(), b.size()); },
                      "range_lo[1] = -3e+38 must be finite and within +-1e30");
  const std::string path = temp_path("bad.vqcal");
  EXPECT_THROW(c.save(path), InvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
  c = synthetic_calibration(1, 1, D, random_rotation(D, 2), 10, 300);
  c.entries[0].mean[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(c.save(path), InvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Calibration, HostileFilesAreRefused) {
  const int64_t D = 4;
  const Calibration c = synthetic_calibration(1, 2, D, random_rotation(D, 2), 20, 300);
  const std::vector<uint8_t> good = c.serialize();
  auto parse = [](const std::vector<uint8_t>& b) { return Calibration::parse(b.data(), b.size()); };
  // Truncated anywhere.
  for (size_t n : {size_t{0}, size_t{10}, size_t{55}, good.size() / 2, good.size() - 1}) {
    std::vector<uint8_t> t(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(parse(t), FormatError) << n;
  }
  // One flipped bit anywhere after the magic and version is caught by the checksum.
  for (size_t at : {size_t{16}, size_t{60}, good.size() / 2, good.size() - 9, good.size() - 1}) {
    std::vector<uint8_t> f = good;
    f[at] ^= 0x10;
    EXPECT_THROW(parse(f), FormatError) << at;
  }
  {
    std::vector<uint8_t> f = good;
    f[0] ^= 1;
    expect_format_error([&] { parse(f); }, "magic");
  }
  {
    std::vector<uint8_t> f = good;
    f[8] = 3;
    expect_format_error([&] { parse(f); }, "version 3");
  }
  // Lying fields with a valid checksum: each is caught by its own check, before allocation.
  {
    std::vector<uint8_t> f = good;
    f[16] = 200;  // n_layers 200: the size no longer matches
    put_u64_at(f, 40, 200 * 2 * 2);
    reseal(f);
    expect_format_error([&] { parse(f); }, "implies");
  }
  {
    std::vector<uint8_t> f = good;
    put_u64_at(f, 40, 7);  // n_entries inconsistent with n_layers * groups * 2
    reseal(f);
    expect_format_error([&] { parse(f); }, "n_entries");
  }
  {
    std::vector<uint8_t> f = good;
    f[24] = 0;  // head_dim 0
    reseal(f);
    expect_format_error([&] { parse(f); }, "head_dim");
  }
  {
    std::vector<uint8_t> f = good;
    f[12] = 5;  // rope mode
    reseal(f);
    expect_format_error([&] { parse(f); }, "rope");
  }
  {
    // The first variance (f64 after mean and basis) made negative.
    std::vector<uint8_t> f = good;
    const size_t at = 56 + 4 * D + 4 * D * D + 7;  // entries start at 56 (version 2)
    f[at] |= 0x80;
    reseal(f);
    expect_format_error([&] { parse(f); }, "variances");
  }
  {
    // A basis entry scaled: no longer orthonormal.
    std::vector<uint8_t> f = good;
    const size_t at = 56 + 4 * D + 3;
    f[at] = static_cast<uint8_t>(f[at] + 1);
    reseal(f);
    expect_format_error([&] { parse(f); }, "orthonormal");
  }
  {
    std::vector<uint8_t> f = good;
    f.insert(f.end() - 8, 4, 0);  // extra bytes before the checksum
    reseal(f);
    expect_format_error([&] { parse(f); }, "implies");
  }
  EXPECT_THROW(Calibration::load(temp_path("missing.vqcal")), IoError);
}

// Issue 16: a calibration records the model it was measured on (format version 2); version 1
// files (no model_id) are still read and re-serialize to their own bytes.
TEST(CalibrationFile, RecordsTheModelIdAndStillReadsVersion1) {
  const int64_t D = 4;
  const RowMatD Q = RowMatD::Identity(D, D);
  Calibration c = synthetic_calibration(1, 1, D, Q, 3, 200, 16);
  c.model_id = 0x1234abcd5678ef90ull;
  const std::vector<uint8_t> v2 = c.serialize();
  EXPECT_EQ(v2[8], 2);
  const Calibration back = Calibration::parse(v2.data(), v2.size());
  EXPECT_EQ(back.model_id, c.model_id);
  EXPECT_EQ(back.format_version, 2);
  EXPECT_TRUE(back == c);
  // Another model id is another calibration (a different id / checksum).
  Calibration other = c;
  other.model_id = 7;
  EXPECT_FALSE(other == c);
  EXPECT_NE(other.id(), c.id());
  // Version 1: 8 bytes shorter, model_id 0 on reading, the same bytes when written again.
  Calibration old = c;
  old.model_id = 0;
  old.format_version = 1;
  const std::vector<uint8_t> v1 = old.serialize();
  EXPECT_EQ(v1[8], 1);
  EXPECT_EQ(v1.size() + 8, v2.size());
  const Calibration back1 = Calibration::parse(v1.data(), v1.size());
  EXPECT_EQ(back1.model_id, 0u);
  EXPECT_EQ(back1.format_version, 1);
  EXPECT_EQ(back1.serialize(), v1);
  // A model id cannot be written in the version-1 layout.
  old.model_id = 5;
  EXPECT_THROW(old.serialize(), InvalidArgument);
}

TEST(CalibrationAlloc, TableDpEqualsAnalyticDpOnAnAnalyticTable) {
  Rng rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng.next_u64() % 20);
    std::vector<double> v(static_cast<size_t>(n));
    for (auto& x : v) x = trial % 5 == 0 ? 1.0 : std::exp(3.0 * rng.normal());  // ties too
    const double beta = 1.5 + 4.0 * static_cast<double>(trial % 7) / 7.0;
    const std::vector<int> choices =
        trial % 2 ? std::vector<int>{0, 1, 2, 3, 4, 6, 8} : std::vector<int>{0, 2, 4, 8};
    const int64_t budget = static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(8 * n + 3));
    std::vector<double> table(static_cast<size_t>(n * kCalibWidths));
    for (int64_t i = 0; i < n; ++i)
      for (int b = 0; b < kCalibWidths; ++b)
        table[static_cast<size_t>(i * kCalibWidths + b)] =
            coding::model_distortion(v[static_cast<size_t>(i)], b, beta);
    EXPECT_EQ(coding::dp_allocate_bits_table(table, kCalibWidths, budget, choices),
              coding::dp_allocate_bits(v, budget, choices, beta))
        << "trial " << trial;
  }
  EXPECT_THROW(coding::dp_allocate_bits_table({1.0, -1.0}, 2, 4, {0, 1}), InvalidArgument);
}

TEST(CalibrationAlloc, MeasuredDpObeysTheBudgetAndBeatsAnalyticOnTheMeasuredTable) {
  const int64_t D = 16;
  const auto x = rows_in_basis(random_rotation(D, 3), 3000, 7);
  const CalibrationEntry e = fit_calibration_entry(x.data(), 3000, D, 128);
  const std::vector<int> choices{0, 1, 2, 3, 4, 6, 8};
  int strictly_better = 0;
  for (int64_t budget : {8, 16, 24, 32, 48, 64}) {
    for (const auto* table : {&e.dist_chunk, &e.dist_range}) {
      const auto m = coding::dp_allocate_bits_table(*table, kCalibWidths, budget, choices);
      const auto a = coding::dp_allocate_bits(e.variances, budget, choices, 3.5);
      int64_t used = 0;
      for (int b : m) used += b;
      EXPECT_LE(used, budget);
      const double dm = coding::table_distortion(*table, kCalibWidths, m);
      const double da = coding::table_distortion(*table, kCalibWidths, a);
      EXPECT_LE(dm, da * (1 + 1e-12)) << "budget " << budget;
      strictly_better += dm < da * (1 - 1e-9);
    }
  }
  // Not a requirement of optimality, but the measured table differs from v * 3.5^-b (1 bit costs
  // more than dropping under min/max quantization), so some budget must show it.
  EXPECT_GT(strictly_better, 0);
}

TEST(CalibrationFit, RecoversAKnownBasisAndMeasuresTheQuantizer) {
  const int64_t D = 8;
  const RowMatD Q = random_rotation(D, 4);
  const auto x = rows_in_basis(Q, 4000, 9);
  const CalibrationEntry e = fit_calibration_entry(x.data(), 4000, D, 128);
  for (int64_t j = 0; j < D; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += e.basis[static_cast<size_t>(j * D + d)] * Q(j, d);
    // Scales 4/(j+1) are 12% or more apart; with 4000 samples the directions are well resolved.
    EXPECT_GT(std::abs(dot), 0.99) << "component " << j;
    const double var = 16.0 / static_cast<double>((j + 1) * (j + 1));
    EXPECT_NEAR(e.variances[static_cast<size_t>(j)], var, 0.1 * var);
    // b = 0 is the latent's mean square; more bits never hurt the calibrated range (the grid
    // holds the full range, which is the chunk quantizer's on the whole set); 8 bits is tiny.
    EXPECT_NEAR(e.dist_chunk[static_cast<size_t>(j * kCalibWidths)], var, 0.1 * var);
    EXPECT_LT(e.dist_range[static_cast<size_t>(j * kCalibWidths + 8)], 1e-4 * var);
    EXPECT_LE(e.dist_range[static_cast<size_t>(j * kCalibWidths + 1)],
              e.dist_range[static_cast<size_t>(j * kCalibWidths)]);
  }
}

class CalibratedCache : public ::testing::Test {
 protected:
  void SetUp() override {
    Q = random_rotation(D, 11);
    cal = synthetic_calibration(2, H, D, Q, 100, 3000, 32);
    path = temp_path("cache.vqcal");
    cal.save(path);
  }
  void TearDown() override { std::filesystem::remove(path); }
  Tensor data(int64_t S, uint64_t seed) const {
    Tensor t(1, H, S, D);
    for (int64_t h = 0; h < H; ++h) {
      const auto x = rows_in_basis(Q, S, seed + static_cast<uint64_t>(h));
      std::copy(x.begin(), x.end(), t.head(0, h));
    }
    return t;
  }
  static double rel_err(const Tensor& a, const Tensor& b) {
    double e = 0, n = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const double d = static_cast<double>(a.data()[i]) - b.data()[i];
      e += d * d;
      n += static_cast<double>(a.data()[i]) * a.data()[i];
    }
    return e / n;
  }
  static constexpr int64_t D = 8, H = 2;
  RowMatD Q;
  Calibration cal;
  std::string path;
};

TEST_F(CalibratedCache, ReconstructsWithoutStoringABasisAndStartsAtOnce) {
  const Tensor K = data(96, 500), V = data(96, 600);
  for (const std::string q : {"chunk", "calibrated"}) {
    const std::string spec =
        "kvtc:bit_budget=64,bit_choices=0,8,chunk_tokens=32,quant=" + q + ",basis=" + path;
    auto cache = make_cache(CacheConfig::parse(spec), D, 1, 2);
    // No fit wait: the first chunk is encoded as soon as 32 rows are there.
    cache->update(K.slice_tokens(0, 31), V.slice_tokens(0, 31));
    EXPECT_EQ(cache->stats().get("encoded_tokens"), 0);
    cache->update(K.slice_tokens(31, 65), V.slice_tokens(31, 65));
    const CacheStats st = cache->stats();
    EXPECT_EQ(st.get("encoded_tokens"), 96);
    // No basis of its own: besides the kernels' unpack tables (O(k), counted in its state) the
    // codec state is the widths, row pointers and fixed ranges only.
    const auto& pc = storetest::codec<codecs::PcaCodec>(*cache, 0, 0, 0);
    EXPECT_GT(pc.unpack_table_bytes(), 0);
    EXPECT_LT(pc.unpack_table_bytes(), 256 * ((D + 7) / 8));  // <= 0.2 KB per group of 8
    // less than its own mean + basis would take
    EXPECT_LT(pc.state_bytes() - pc.unpack_table_bytes(), 4 * D * (1 + D));
    // 2 x H entries (K and V of each head), each mean + D basis rows, plus (lo, hi) per kept
    // component when the ranges are calibrated
    EXPECT_EQ(st.get("external_basis_bytes"),
              2.0 * H * (4 * D * (1 + D) + (q == "calibrated" ? 8 * D : 0)));
    const FetchResult r = cache->fetch();
    // 8 bits on every component: a uniform quantizer with step range/255 has MSE step^2 / 12,
    // about 1e-4 of the variance for a +-4 sigma range; 1e-3 leaves 10x for wider ranges.
    EXPECT_LT(rel_err(K, r.keys), 1e-3) << q;
    EXPECT_LT(rel_err(V, r.values), 1e-3) << q;
    // quant=calibrated stores no per-chunk parameters; quant=chunk a (min, scale) per kept
    // component and chunk: 3 chunks, every component kept at 8 bits.
    EXPECT_EQ(pc.chunk_param_bytes(32), q == "calibrated" ? 0 : 8 * D);
    EXPECT_EQ(st.get("chunks"), 3.0 * H);
  }
}

TEST_F(CalibratedCache, MismatchesAreRefused) {
  const Tensor K = data(8, 1), V = data(8, 2);
  const std::string b = ",basis=" + path;
  EXPECT_THROW(make_cache(CacheConfig::parse("kvtc:rope=pre" + b), D, 0, 2), InvalidArgument);
  EXPECT_THROW(make_cache(CacheConfig::parse("kvtc:chunk_tokens=8" + b), D, 2, 3),
               InvalidArgument);  // layer 2 of a 2-layer calibration
  EXPECT_THROW(make_cache(CacheConfig::parse("kvtc:chunk_tokens=8" + b), 2 * D, 0, 2),
               InvalidArgument);
  auto three_heads = make_cache(CacheConfig::parse("kvtc:chunk_tokens=8" + b), D, 0, 2);
  const Tensor K3(1, 3, 4, D), V3(1, 3, 4, D);
  EXPECT_THROW(three_heads->update(K3, V3), InvalidArgument);
  EXPECT_THROW(make_cache(CacheConfig::parse("kvtc:basis=" + temp_path("none.vqcal")), D), IoError);
  EXPECT_THROW(CacheConfig::parse("kvtc:alloc=dp_measured"), InvalidArgument);
  EXPECT_THROW(CacheConfig::parse("kvtc:quant=calibrated"), InvalidArgument);
  EXPECT_THROW(make_codec("kvtc:chunk_tokens=8" + b, D), InvalidArgument);
  EXPECT_THROW(make_codec("kvtc:sink_tokens=4", D), InvalidArgument);
  // the per-chunk table was measured with chunk_tokens = 32
  EXPECT_THROW(
      make_cache(CacheConfig::parse("kvtc:chunk_tokens=16,alloc=dp_measured" + b), D, 0, 2),
      InvalidArgument);
  EXPECT_NO_THROW(make_cache(
      CacheConfig::parse("kvtc:chunk_tokens=16,alloc=dp_measured,quant=calibrated" + b), D, 0, 2));
}

TEST_F(CalibratedCache, HeaderOfAnotherStreamIsRefused) {
  transform::PcaSettings s;
  s.bit_budget = 4 * D;
  s.bit_choices = {0, 1, 2, 3, 4, 6, 8};
  s.calibration = std::make_shared<const Calibration>(cal);
  s.calibration_id = cal.id();
  transform::PcaRowCoder enc(D, s, transform::StreamId{1, 1, 0, H});  // layer 1, head 1, keys
  EncodedSection sec;
  enc.fit(nullptr, 0, sec);
  transform::PcaRowCoder same(D, s, transform::StreamId{1, 1, 0, H});
  coding::ByteReader r(sec.bytes.data(), sec.bytes.size());
  same.read_header(r);
  EXPECT_TRUE(r.at_end());
  transform::PcaRowCoder values(D, s, transform::StreamId{1, 1, 1, H});  // values of that head
  coding::ByteReader r2(sec.bytes.data(), sec.bytes.size());
  expect_format_error([&] { values.read_header(r2); }, "does not belong to this stream");
}

TEST_F(CalibratedCache, HeaderWithAnotherCalibrationIdIsRefused) {
  const Calibration other = synthetic_calibration(2, H, D, random_rotation(D, 12), 200, 1000, 32);
  transform::PcaSettings s;
  s.bit_budget = 4 * D;
  s.bit_choices = {0, 1, 2, 3, 4, 6, 8};
  s.calibration = std::make_shared<const Calibration>(cal);
  s.calibration_id = cal.id();
  transform::PcaRowCoder enc(D, s, transform::StreamId{1, 1, 0, H});
  EncodedSection sec;
  enc.fit(nullptr, 0, sec);
  EXPECT_EQ(sec.breakdown.basis, 0);
  {
    transform::PcaRowCoder dec(D, s);
    coding::ByteReader r(sec.bytes.data(), sec.bytes.size());
    dec.read_header(r);  // the same calibration reads it
    EXPECT_TRUE(r.at_end());
    EXPECT_EQ(dec.model().kept_bits, enc.model().kept_bits);
  }
  transform::PcaSettings s2 = s;
  s2.calibration = std::make_shared<const Calibration>(other);
  s2.calibration_id = other.id();
  ASSERT_NE(s2.calibration_id, s.calibration_id);
  transform::PcaRowCoder dec2(D, s2);
  coding::ByteReader r2(sec.bytes.data(), sec.bytes.size());
  expect_format_error([&] { dec2.read_header(r2); }, "calibration id");
  transform::PcaSettings local = s;
  local.calibration = nullptr;
  transform::PcaRowCoder dec3(D, local);
  coding::ByteReader r3(sec.bytes.data(), sec.bytes.size());
  expect_format_error([&] { dec3.read_header(r3); }, "no calibration");
}

TEST(KvtcSinkRecent, SinkAndRecentRowsAreExactFp16AndCounted) {
  const int64_t D = 8, H = 2, S = 70;
  Rng rng(3);
  Tensor K(1, H, S, D), V(1, H, S, D);
  for (int64_t i = 0; i < K.numel(); ++i) {
    K.data()[i] = static_cast<float>(rng.normal() * 3.1);
    V.data()[i] = static_cast<float>(rng.normal() * 1.7);
  }
  auto cache = make_cache(
      "kvtc:sink_tokens=4,recent_tokens=10,chunk_tokens=16,fit_tokens=16,"
      "bit_budget=16",
      D);
  for (int64_t s = 0; s < S; ++s) cache->update(K.slice_tokens(s, 1), V.slice_tokens(s, 1));
  // 66 rows after the sinks; chunks of 16 are encoded while 10 stay raw after them: the fit at
  // 16 rows encodes 6 (16 - 10), then chunks at 32, 48, 64 rows seen: 6 + 16 * 3 = 54, 12 raw.
  const CacheStats st = cache->stats();
  EXPECT_EQ(st.get("encoded_tokens"), 54);
  EXPECT_EQ(st.get("raw_tokens"), 16);  // 4 sinks + 12 recent
  const FetchResult r = cache->fetch();
  int64_t diff_encoded = 0;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t d = 0; d < D; ++d) {
        const bool raw = t < 4 || t >= S - 12;
        if (raw) {
          ASSERT_EQ(r.keys.at(0, h, t, d), round_to_fp16(K.at(0, h, t, d))) << t;
          ASSERT_EQ(r.values.at(0, h, t, d), round_to_fp16(V.at(0, h, t, d))) << t;
        } else {
          diff_encoded += r.keys.at(0, h, t, d) != round_to_fp16(K.at(0, h, t, d));
        }
      }
  EXPECT_GT(diff_encoded, 0);  // 2 bits per value on N(0, 1) noise: the middle really is coded
  EXPECT_DOUBLE_EQ(st.kept_bytes, st.content_bytes + st.codec_param_bytes + st.policy_bytes +
                                      st.index_bytes + st.overhead_bytes);
}

TEST(KvtcRope, PreRopeKeysThroughTheEngineOnStories260K) {
  VQ_REQUIRE_MODEL_FILE(model_path, "stories260K.bin");
  const Model model = Model::load(model_path);
  const auto tokens = vqtest::some_tokens(120, model.config().vocab_size, 4);
  const int64_t D = model.config().head_dim();
  auto run = [&](const std::string& spec, std::vector<float>& logits) {
    Engine e(model, spec);
    logits.clear();
    for (int32_t t : tokens) {
      const float* l = e.step(t);
      logits.insert(logits.end(), l, l + model.config().vocab_size);
    }
    return e.cache(0).fetch();
  };
  std::vector<float> lf, lpost, lpre, l8post, l8pre;
  run("full", lf);
  // Every position a sink: all rows stored exactly at fp16, so post = full bit for bit, and pre
  // differs only by rotating fp16 keys instead of rounding rotated ones.
  const FetchResult post = run("kvtc:sink_tokens=100000", lpost);
  const FetchResult pre = run("kvtc:sink_tokens=100000,rope=pre", lpre);
  double max_dl = 0, max_post = 0;
  for (size_t i = 0; i < lf.size(); ++i) {
    max_dl = std::max(max_dl, double(std::abs(lpre[i] - lpost[i])));
    max_post = std::max(max_post, double(std::abs(lpost[i] - lf[i])));
  }
  // fp16 rounding before vs after a rotation moves each key by ~2^-11 relative; logits of this
  // model are O(10), so 0.05 is far above that and far below a missing rotation (checked below).
  EXPECT_LT(max_dl, 0.05);
  EXPECT_LT(max_post, 0.05);
  // The cache got un-rotated keys: rotating them by their position gives the post keys.
  double max_rot = 0, max_unrot = 0;
  for (int64_t h = 0; h < post.keys.H(); ++h)
    for (int64_t t = 0; t < post.keys.S(); ++t)
      for (int64_t i = 0; i < D / 2; ++i) {
        const double f = std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(D));
        const double a = static_cast<double>(t) * f;
        const double k0 = pre.keys.at(0, h, t, 2 * i), k1 = pre.keys.at(0, h, t, 2 * i + 1);
        const double r0 = k0 * std::cos(a) - k1 * std::sin(a),
                     r1 = k0 * std::sin(a) + k1 * std::cos(a);
        const double p0 = post.keys.at(0, h, t, 2 * i), p1 = post.keys.at(0, h, t, 2 * i + 1);
        max_rot = std::max({max_rot, std::abs(r0 - p0) / (1 + std::abs(p0)),
                            std::abs(r1 - p1) / (1 + std::abs(p1))});
        max_unrot = std::max({max_unrot, std::abs(k0 - p0), std::abs(k1 - p1)});
      }
  EXPECT_LT(max_rot, 2e-3);   // two fp16 roundings (2^-11 each), relative
  EXPECT_GT(max_unrot, 0.1);  // un-rotated keys are really different
  // 8 bits on every component, pre vs post: both close to full.
  // fit_tokens = 64 so that the local fit is full rank (8 tokens give a rank-7 centered fit and
  // a dropped component).
  const std::string b8 =
      "kvtc:bit_budget=" + std::to_string(8 * D) + ",bit_choices=0,8,chunk_tokens=32,fit_tokens=64";
  run(b8, l8post);
  run(b8 + ",rope=pre", l8pre);
  double d8post = 0, d8pre = 0;
  for (size_t i = 0; i < lf.size(); ++i) {
    d8post = std::max(d8post, double(std::abs(l8post[i] - lf[i])));
    d8pre = std::max(d8pre, double(std::abs(l8pre[i] - lf[i])));
  }
  // 8-bit min/max codes move each latent by <= range/510. Both measured about 0.04 here; 0.5 is
  // ~10x that and far below what a wrong rotation or a dropped component gives (a rank-deficient
  // fit_tokens = 8 fit measured 5.3).
  std::printf("  max |logit - full|: 8-bit post %.4f, pre %.4f\n", d8post, d8pre);
  EXPECT_LT(d8post, 0.5);
  EXPECT_LT(d8pre, 0.5);
}

using vqtest::CliRun;
using vqtest::run_cli;

TEST(CalibrateCli, WritesALoadableFile) {
#ifndef VQ_CLI_PATH
  GTEST_SKIP() << "the veloxquant CLI path is not known to this build";
#else
  if (!std::filesystem::exists(VQ_CLI_PATH)) GTEST_SKIP() << "the veloxquant CLI is not built";
  VQ_REQUIRE_MODEL_FILE(model, "stories260K.bin");
  VQ_REQUIRE_MODEL_FILE(tok, "tok512.bin");
  VQ_REQUIRE_MODEL_FILE(text, "tinystories-val.txt");
  const std::string out = temp_path("cli.vqcal");
  const CliRun r =
      run_cli("calibrate --model '" + model + "' --tokenizer '" + tok + "' --text '" + text +
              "' --max-tokens 600 --skip-tokens 100 --rope pre --out '" + out + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  const Calibration c = Calibration::load(out);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.rope, RopeMode::Pre);
  EXPECT_EQ(c.tokens, 602);  // 600 text tokens in 2 windows, each with its BOS
  EXPECT_EQ(c.chunk_tokens, 128);
  auto cache =
      make_cache(CacheConfig::parse("kvtc:rope=pre,alloc=dp_measured,basis=" + out), 8, 4, 5);
  EXPECT_TRUE(cache->wants_pre_rope_keys());
  const CliRun bad =
      run_cli("calibrate --model '" + model + "' --out '" + out + "' --rope sideways");
  EXPECT_NE(bad.status, 0);
  std::filesystem::remove(out);
#endif
}

/// Held out: calibrate on the start of tinystories-val.txt, evaluate on a disjoint later part.
TEST(CalibrationHeldOut, CalibratedBasisBeatsLocalOnStories260K) {
  VQ_REQUIRE_MODEL_FILE(model_path, "stories260K.bin");
  VQ_REQUIRE_MODEL_FILE(tok_path, "tok512.bin");
  VQ_REQUIRE_MODEL_FILE(text_path, "tinystories-val.txt");
  const Model model = Model::load(model_path);
  const Tokenizer tok = Tokenizer::load(tok_path, model.config().vocab_size);
  std::ifstream f(text_path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  const std::vector<int32_t> enc = tok.encode(text, false, false);
  ASSERT_GT(enc.size(), 30000u);
  const int64_t ctx = model.config().seq_len, D = model.config().head_dim();
  const std::vector<int32_t> calib_part(enc.begin(), enc.begin() + 8 * (ctx - 1));
  const std::vector<int32_t> eval_part(enc.begin() + 20000, enc.end());
  CalibrateOptions co;
  const Calibration cal = calibrate_model(model, eval::make_windows(calib_part, ctx), co);
  const std::string path = temp_path("heldout.vqcal");
  cal.save(path);
  eval::FidelityOptions fo;
  for (int64_t bpv : {2, 3}) {
    const std::string base = "kvtc:bit_budget=" + std::to_string(bpv * D);
    fo.methods.push_back(base);
    fo.methods.push_back(base + ",basis=" + path);
  }
  const auto rep = eval::run_fidelity(model, eval::make_windows(eval_part, ctx, 2 * (ctx - 1)), fo);
  std::filesystem::remove(path);
  ASSERT_EQ(rep.methods.size(), 4u);
  for (size_t i = 0; i < 4; i += 2) {
    const auto& local = rep.methods[i];
    const auto& calib = rep.methods[i + 1];
    std::printf(
        "  %s: KL %.5f top1 %.4f B/tok %.2f (stored %.2f) | calibrated: KL %.5f top1 %.4f B/tok "
        "%.2f (stored %.2f)\n",
        local.spec.c_str(), local.kl_mean, local.top1_agreement, local.bytes_per_token,
        local.stored_bytes_per_token, calib.kl_mean, calib.top1_agreement, calib.bytes_per_token,
        calib.stored_bytes_per_token);
    // Stored: no basis and the same code budget, so never more. Resident: at head_dim 8 a
    // stream's unpack tables (counted in its state) are near the size of the basis a local
    // stream holds; a calibrated stream holds its tables from the first chunk, a local one
    // only after its fit, so the two are even to about 1% (0.85% and 0.13% when written).
    EXPECT_LE(calib.stored_bytes_per_token, local.stored_bytes_per_token) << local.spec;
    EXPECT_LE(calib.bytes_per_token, 1.02 * local.bytes_per_token) << local.spec;
    EXPECT_LE(calib.kl_mean, local.kl_mean) << local.spec;
  }
}

}  // namespace
}  // namespace vq

// The 512-bit Q8_0, Q4_K / Q5_K and Q6_K row kernels (row_dot.cpp: Block32Rows512,
// KQuantRows512, Q6KRows512)
// against scalar models of their lanes: which products meet which accumulator lane, in which
// order the lanes are added, and where the fp32 roundings fall (one multiply for a block's factor,
// one fused multiply-add per lane and block). The models take the input as prepare_row_dot_input
// leaves it and decode the weight blocks the way ggml documents them, so a kernel change that
// moves a single rounding (a reordered sum, a factor formed differently, a lane meeting the wrong
// scale) fails here, where the dequantize-then-multiply tests (matmul_test.cpp) allow for fp32
// summation error. Before this test, sessions 32-33 checked such changes by hashes only
// (results/session32/runs.txt). The models call fma where the kernel has one, and contain no
// multiply whose result is then added, so fp-contraction cannot change them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/quant_blocks.hpp"
#include "kernels/row_dot.hpp"
#include "veloxquant/tensor.hpp"

namespace {

using vq::GgmlType;
using vq::WeightMatrix;
using vq::kernels::detail::RowDotInput;

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__AVX512F__) && \
    defined(__AVX512BW__)
constexpr bool kLanes512 = true;
#else
constexpr bool kLanes512 = false;
#endif

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return vq::fp16_to_fp32(h);
}

// The kernels' reduction of 8 lanes (hsum): lane i + lane i + 4, then (0 + 2) and (1 + 3), then
// those two.
float reduce8(const float* v8) {
  float s4[4];
  for (int i = 0; i < 4; ++i) s4[i] = v8[i] + v8[i + 4];
  const float s0 = s4[0] + s4[2];
  const float s1 = s4[1] + s4[3];
  return s0 + s1;
}

// Of 16 lanes: the two 8-lane halves added lane by lane, then reduce8.
float reduce16(const float* l) {
  float v8[8];
  for (int i = 0; i < 8; ++i) v8[i] = l[i] + l[i + 8];
  return reduce8(v8);
}

// The K-quant kernels' four accumulators: (0 + 1) + (2 + 3) lane by lane, then reduce16.
float reduce_four(const float (&acc)[4][16]) {
  float t[16];
  for (int i = 0; i < 16; ++i) {
    const float a01 = acc[0][i] + acc[1][i];
    const float a23 = acc[2][i] + acc[3][i];
    t[i] = a01 + a23;
  }
  return reduce16(t);
}

// A 64-byte vector as the Q5_K and Q6_K kernels form it from 32 bytes of high bits: the bytes as
// they are, then the same bytes shifted right by 2 in 16-bit words.
void high_bits_pair(const uint8_t* qh, uint8_t* out) {
  std::memcpy(out, qh, 32);
  for (int w = 0; w < 16; ++w) {
    uint16_t v;
    std::memcpy(&v, qh + 2 * w, 2);
    v = static_cast<uint16_t>(v >> 2);
    std::memcpy(out + 32 + 2 * w, &v, 2);
  }
}

// Q8_0 (34-byte blocks: fp16 d, 32 int8 codes) on int16 input levels: block j's 16 int32 lanes
// (lane i: codes 2i and 2i + 1 times their levels) are scaled by d_j * scale_j and added into
// accumulator j % 2, lane by lane; the two accumulators are added, then reduced. `accumulators`
// 1 is the deliberately wrong model of the last test.
float q8_0_model(const uint8_t* row, const RowDotInput& in, int accumulators = 2) {
  const int64_t nb = in.cols / 32;
  float acc[2][16] = {};
  for (int64_t j = 0; j < nb; ++j) {
    const uint8_t* p = row + 34 * j;
    const float factor = half_at(p) * in.scale[static_cast<size_t>(j)];
    for (int i = 0; i < 16; ++i) {
      const auto c0 = static_cast<int8_t>(p[2 + 2 * i]), c1 = static_cast<int8_t>(p[3 + 2 * i]);
      const int32_t s = c0 * in.q[static_cast<size_t>(32 * j + 2 * i)] +
                        c1 * in.q[static_cast<size_t>(32 * j + 2 * i + 1)];
      float& a = acc[j % accumulators][i];
      a = std::fma(factor, static_cast<float>(s), a);
    }
  }
  float lanes[16];
  for (int i = 0; i < 16; ++i) lanes[i] = acc[0][i] + acc[1][i];
  return reduce16(lanes);
}

// A Q4_K / Q5_K super-block's 6-bit scale and min of 32-value block s (0-7), from the 12 bytes
// at q (ggml's layout).
void k_scale_min(const uint8_t* q, int s, int& sc, int& mn) {
  if (s < 4) {
    sc = q[s] & 63;
    mn = q[s + 4] & 63;
  } else {
    sc = (q[s + 4] & 0x0F) | ((q[s - 4] >> 6) << 4);
    mn = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
  }
}

// Q4_K (144 bytes: fp16 d, fp16 dmin, 12 scale bytes, 128 nibble bytes) and Q5_K (176 bytes: the
// same with 32 bytes of fifth bits before the nibbles) on int8 levels. Per super-block, 16
// factor lanes: lane 2s holds (d * sc_s) * scale_s, lane 2s + 1 (dmin * mn_s) * scale_s; the
// min terms are the factors' fma with the level sums (pair_qsum: 0 in even lanes) into one
// 16-lane accumulator. Nibble bytes 64h .. 64h + 63: lane i of the low-nibble sums is bytes
// 4i .. 4i + 3 against levels 128h + 4i .., of the high-nibble sums against 128h + 64 + 4i ..;
// lanes 0-7 take the factor of lane 8h / 8h + 2 (low / high), lanes 8-15 that of 8h + 4 /
// 8h + 6, into accumulators 2h / 2h + 1. Result: the sum of the four accumulators ((0 + 1) +
// (2 + 3)) reduced, minus the odd min lanes reduced.
float k_quant_model(const uint8_t* row, const RowDotInput& in, bool five) {
  const int64_t block = five ? 176 : 144, nibbles = five ? 48 : 16;
  float acc[4][16] = {}, mins[16] = {};
  for (int64_t sb = 0; sb < in.cols / 256; ++sb) {
    const uint8_t* b = row + block * sb;
    const float d = half_at(b), dmin = half_at(b + 2);
    float f[16];
    for (int l = 0; l < 16; ++l) {
      int sc = 0, mn = 0;
      k_scale_min(b + 4, l / 2, sc, mn);
      const float t = (l % 2 == 0 ? d : dmin) * static_cast<float>(l % 2 == 0 ? sc : mn);
      f[l] = t * in.pair_scale[static_cast<size_t>(16 * sb + l)];
      mins[l] = std::fma(f[l], in.pair_qsum[static_cast<size_t>(16 * sb + l)], mins[l]);
    }
    // Q5_K's fifth bits as the kernel forms them: qh (32 bytes) then qh shifted right by 2 in
    // 16-bit words; for half h, bit 4h of a byte goes to bit 4 of the low nibble's byte and bit
    // 4h + 1 to bit 4 of the high one's, each moved by a 16-bit shift and masked per byte.
    uint8_t qh2[64] = {};
    if (five) high_bits_pair(b + 16, qh2);
    const auto high = [&](int j, int bit) -> int {  // byte j's bit 4 after the kernel's move
      uint16_t w;
      std::memcpy(&w, qh2 + (j & ~1), 2);
      const auto moved = static_cast<uint16_t>(bit <= 4 ? w << (4 - bit) : w >> (bit - 4));
      const auto byte = static_cast<uint8_t>(j % 2 == 0 ? moved & 0xFF : moved >> 8);
      return byte & 0x10;
    };
    const int8_t* q = in.q8.data() + 256 * sb;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* raw = b + nibbles + 64 * h;
      for (int i = 0; i < 16; ++i) {
        int32_t sl = 0, sh = 0;
        for (int t = 0; t < 4; ++t) {
          const int j = 4 * i + t;
          int lo = raw[j] & 0x0F, hi = raw[j] >> 4;
          if (five) {
            lo |= high(j, 4 * h);
            hi |= high(j, 4 * h + 1);
          }
          sl += lo * q[128 * h + j];
          sh += hi * q[128 * h + 64 + j];
        }
        const int fl = 8 * h + (i < 8 ? 0 : 4), fh = fl + 2;
        acc[2 * h][i] = std::fma(f[fl], static_cast<float>(sl), acc[2 * h][i]);
        acc[2 * h + 1][i] = std::fma(f[fh], static_cast<float>(sh), acc[2 * h + 1][i]);
      }
    }
  }
  float odd[8];
  for (int k = 0; k < 8; ++k) odd[k] = mins[2 * k + 1];
  const float sum = reduce_four(acc);
  const float m = reduce8(odd);
  return sum - m;
}

// Q6_K (210 bytes: ql[128], qh[64], int8 scales[16], fp16 d) on int8 levels in value order, per
// 128-value half hf: the factor of 16-value group g (0-7) is (d * sc[8 hf + g]) * scale of its
// 32-value block; byte j of ql's 64 gives value j (low nibble, top bits 0-1 of qh byte j % 32,
// taken from qh or from qh >> 2 in 16-bit words for j >= 32) and value 64 + j (high nibble, top
// bits 4-5 of the same byte). Lane i sums 4 unsigned codes against their levels, starting from
// offset4 (-32 times the levels' sum); low-nibble lanes take group i / 4, high ones 4 + i / 4,
// into accumulators 2 hf and 2 hf + 1; then ((0 + 1) + (2 + 3)) reduced.
float q6_k_model(const uint8_t* row, const RowDotInput& in) {
  float acc[4][16] = {};
  for (int64_t sb = 0; sb < in.cols / 256; ++sb) {
    const uint8_t* b = row + 210 * sb;
    const float d = half_at(b + 208);
    for (int hf = 0; hf < 2; ++hf) {
      float f[8];
      for (int g = 0; g < 8; ++g) {
        const float t = d * static_cast<float>(static_cast<int8_t>(b[192 + 8 * hf + g]));
        f[g] = t * in.scale[static_cast<size_t>(8 * sb + 4 * hf + g / 2)];
      }
      uint8_t h2[64];
      high_bits_pair(b + 128 + 32 * hf, h2);
      const uint8_t* l = b + 64 * hf;
      const int64_t at = 256 * sb + 128 * hf;
      for (int i = 0; i < 16; ++i) {
        int32_t s0 = in.offset4[static_cast<size_t>(at / 4 + i)];
        int32_t s1 = in.offset4[static_cast<size_t>(at / 4 + 16 + i)];
        for (int t = 0; t < 4; ++t) {
          const int j = 4 * i + t;
          const int lo = (l[j] & 0x0F) | ((h2[j] & 0x03) << 4);
          const int hi = (l[j] >> 4) | (h2[j] & 0x30);
          s0 += lo * in.q8[static_cast<size_t>(at + j)];
          s1 += hi * in.q8[static_cast<size_t>(at + 64 + j)];
        }
        acc[2 * hf][i] = std::fma(f[i / 4], static_cast<float>(s0), acc[2 * hf][i]);
        acc[2 * hf + 1][i] = std::fma(f[4 + i / 4], static_cast<float>(s1), acc[2 * hf + 1][i]);
      }
    }
  }
  return reduce_four(acc);
}

// Rows of random blocks against inputs of several kinds: normal values, a wide range of
// magnitudes per block, and blocks of zeros; every row's kernel result must have the model's bits.
void check_against_model(GgmlType t, const std::vector<int64_t>& widths) {
  const int64_t rows = 9;
  for (const int64_t cols : widths) {
    const vqtest::Bytes data =
        vqtest::random_stored(t, rows * cols, 300 + static_cast<uint64_t>(cols));
    const WeightMatrix w{t, data.data(), rows, cols};
    for (int kind = 0; kind < 3; ++kind) {
      std::mt19937_64 rng(17 + static_cast<uint64_t>(cols) + 101 * static_cast<uint64_t>(kind));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(cols));
      for (int64_t c = 0; c < cols; ++c) {
        float v = normal(rng);
        if (kind == 1) v *= std::ldexp(1.0f, static_cast<int>(c / 32 % 24) - 12);
        if (kind == 2 && c / 32 % 3 == 1) v = 0.0f;
        x[static_cast<size_t>(c)] = v;
      }
      RowDotInput in;
      vq::kernels::detail::prepare_row_dot_input(t, x.data(), cols, in);
      std::vector<float> y(static_cast<size_t>(rows));
      vq::kernels::detail::dot_rows(w, in, 0, rows, y.data(), false);
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = data.data() + r * static_cast<int64_t>(w.row_bytes());
        const float want = t == GgmlType::Q8_0   ? q8_0_model(row, in)
                           : t == GgmlType::Q6_K ? q6_k_model(row, in)
                                                 : k_quant_model(row, in, t == GgmlType::Q5_K);
        uint32_t a, b;
        std::memcpy(&a, &y[static_cast<size_t>(r)], 4);
        std::memcpy(&b, &want, 4);
        ASSERT_EQ(a, b) << vq::ggml_type_name(static_cast<uint32_t>(t)) << " cols " << cols
                        << " input kind " << kind << " row " << r << ": kernel "
                        << y[static_cast<size_t>(r)] << ", model " << want;
      }
    }
  }
}

TEST(RowDotLanes, Q8_0KernelHasTheBitsOfItsLaneModel) {
  if (!kLanes512 || !vq::kernels::detail::has_row_dot(GgmlType::Q8_0))
    GTEST_SKIP() << "the 512-bit Q8_0 row kernel is not in this build (needs AVX-512 BW)";
  // 16-block groups (the factors formed 16 at a time where the build has AVX-512 VBMI; the pair
  // loop otherwise, with the same bits) with 0-3 blocks left over, and odd block counts
  check_against_model(GgmlType::Q8_0, {32, 64, 96, 512, 544, 576, 608, 1056, 2048});
}

TEST(RowDotLanes, Q4_KAndQ5_KKernelsHaveTheBitsOfTheirLaneModel) {
  if (!kLanes512 || !vq::kernels::detail::has_row_dot(GgmlType::Q4_K))
    GTEST_SKIP() << "the 512-bit K-quant row kernels are not in this build (needs AVX-512 BW)";
  check_against_model(GgmlType::Q4_K, {256, 512, 2304});
  check_against_model(GgmlType::Q5_K, {256, 512, 2304});
}

TEST(RowDotLanes, Q6_KKernelHasTheBitsOfItsLaneModel) {
  if (!kLanes512 || !vq::kernels::detail::has_row_dot(GgmlType::Q6_K))
    GTEST_SKIP() << "the 512-bit Q6_K row kernel is not in this build (needs AVX-512 BW)";
  check_against_model(GgmlType::Q6_K, {256, 512, 2304});
}

// The comparison can fail: a model that differs from q8_0_model only in sending every block to
// one accumulator (the kernel alternates two) no longer matches the kernel on typical data.
TEST(RowDotLanes, AModelWithOneAccumulatorDoesNotMatch) {
  if (!kLanes512 || !vq::kernels::detail::has_row_dot(GgmlType::Q8_0))
    GTEST_SKIP() << "the 512-bit Q8_0 row kernel is not in this build (needs AVX-512 BW)";
  const int64_t cols = 512, rows = 9;
  const vqtest::Bytes data = vqtest::random_stored(GgmlType::Q8_0, rows * cols, 77);
  const WeightMatrix w{GgmlType::Q8_0, data.data(), rows, cols};
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(cols));
  for (float& v : x) v = normal(rng);
  RowDotInput in;
  vq::kernels::detail::prepare_row_dot_input(GgmlType::Q8_0, x.data(), cols, in);
  std::vector<float> y(static_cast<size_t>(rows));
  vq::kernels::detail::dot_rows(w, in, 0, rows, y.data(), false);
  int differ = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = data.data() + r * static_cast<int64_t>(w.row_bytes());
    const float moved = q8_0_model(row, in, 1);
    differ += std::memcmp(&moved, &y[static_cast<size_t>(r)], 4) != 0;
  }
  EXPECT_GT(differ, 0) << "a model with one accumulator matched every row: the check is too weak";
}

}  // namespace

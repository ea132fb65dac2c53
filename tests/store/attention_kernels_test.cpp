// Attention on the stored codes: the row kernels (src/store/row_kernels.hpp,
// src/coding/ggml_dot.hpp) against their scalar _ref twins and against dequantize-then-attend
// (in double), and the store's RowSource::dot / accumulate against read() + the same products.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "codecs/ggml_codec.hpp"
#include "codecs/kivi_codec.hpp"
#include "codecs/pca_codec.hpp"
#include "coding/ggml_blocks.hpp"
#include "coding/ggml_dot.hpp"
#include "core/rng.hpp"
#include "store/head_store.hpp"
#include "store/row_codec.hpp"
#include "store/row_kernels.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/row_source.hpp"
#include "veloxquant/tensor.hpp"

namespace {

using vq::coding::GgmlType;
using vq::store::FloatRows;

std::vector<float> randn(int64_t n, uint64_t seed, double scale = 1.0) {
  vq::Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = static_cast<float>(rng.normal() * scale);
  return x;
}

// n rows of D with a few strong directions and an offset, as real keys and values have: noise
// (seed) plus two random multiples (seed_z) of fixed cosine / sine profiles.
std::vector<float> correlated_rows(int64_t n, int64_t D, uint64_t seed, uint64_t seed_z) {
  auto x = randn(n * D, seed, 0.3);
  const auto z = randn(n * 3, seed_z);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < D; ++d)
      x[static_cast<size_t>(t * D + d)] +=
          2.0f * z[static_cast<size_t>(3 * t)] * std::cos(0.3f * d) +
          z[static_cast<size_t>(3 * t + 1)] * std::sin(0.7f * d) + 0.5f;
  return x;
}

// Dequantize-then-attend in double: out[i] = rows_i . q, and acc += sum_i w_i rows_i.
void exact_dot(const std::vector<float>& rows, int64_t n, int64_t D, const float* q,
               std::vector<double>& out, std::vector<double>& mag) {
  out.assign(static_cast<size_t>(n), 0.0);
  mag.assign(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) {
      const double p = static_cast<double>(rows[static_cast<size_t>(i * D + d)]) * q[d];
      out[static_cast<size_t>(i)] += p;
      mag[static_cast<size_t>(i)] += std::fabs(p);
    }
}

void exact_axpy(const std::vector<float>& rows, int64_t n, int64_t D, const float* w,
                const std::vector<float>& acc0, std::vector<double>& out,
                std::vector<double>& mag) {
  out.assign(acc0.begin(), acc0.end());
  mag.assign(static_cast<size_t>(D), 0.0);
  for (int64_t d = 0; d < D; ++d)
    mag[static_cast<size_t>(d)] = std::fabs(acc0[static_cast<size_t>(d)]);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) {
      const double p = static_cast<double>(w[i]) * rows[static_cast<size_t>(i * D + d)];
      out[static_cast<size_t>(d)] += p;
      mag[static_cast<size_t>(d)] += std::fabs(p);
    }
}

// A float sum of k terms is within k * 2^-23 of the sum of their magnitudes (plus the rounding
// of each product); `terms` bounds the number of roundings in a result's chain.
void expect_close(const float* got, const std::vector<double>& want, const std::vector<double>& mag,
                  int64_t terms, const char* what) {
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = static_cast<double>(terms + 4) * 0x1.0p-23 * mag[i] + 1e-30;
    ASSERT_LE(std::fabs(static_cast<double>(got[i]) - want[i]), tol)
        << what << " at " << i << ": got " << got[i] << ", want " << want[i];
  }
}

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, sizeof(float) * static_cast<size_t>(n)) == 0;
}

// ---- fp32 / fp16 / bf16 rows

struct FloatCase {
  FloatRows t;
  const char* name;
  int64_t bytes;
};
const FloatCase kFloat[] = {
    {FloatRows::F32, "f32", 4}, {FloatRows::F16, "f16", 2}, {FloatRows::BF16, "bf16", 2}};

// n rows of D values stored as t, starting `offset` bytes into the buffer (unaligned codes).
std::vector<uint8_t> store_float_rows(FloatRows t, const std::vector<float>& x, int64_t offset,
                                      std::vector<float>& decoded) {
  std::vector<uint8_t> buf(static_cast<size_t>(offset) + x.size() * 4);
  decoded.resize(x.size());
  uint8_t* p = buf.data() + offset;
  for (size_t i = 0; i < x.size(); ++i) {
    if (t == FloatRows::F32) {
      std::memcpy(p + 4 * i, &x[i], 4);
      decoded[i] = x[i];
    } else {
      const uint16_t h = t == FloatRows::F16 ? vq::fp32_to_fp16(x[i]) : vq::fp32_to_bf16(x[i]);
      std::memcpy(p + 2 * i, &h, 2);
      decoded[i] = t == FloatRows::F16 ? vq::fp16_to_fp32(h) : vq::bf16_to_fp32(h);
    }
  }
  return buf;
}

// float_dot_rows_many / float_axpy_rows_many (a query group in one pass over the rows) give
// every query the bits the one-query kernels give it, at head dims with and without 8- and
// 32-value tails (and, for the AVX-512 group kernels, multiples of 16 and 32 that leave every
// span of 16-value groups), row counts that leave the group kernels' blocks of 16 and 8 rows and
// single rows, and query counts that leave every group size.
TEST(AttentionKernels, FloatRowsManyEqualOneQueryAtATime) {
  for (const FloatCase& fc : kFloat)
    for (int64_t D : {int64_t{5}, int64_t{8}, int64_t{20}, int64_t{40}, int64_t{48}, int64_t{64},
                      int64_t{80}, int64_t{96}, int64_t{128}, int64_t{131}})
      for (int64_t nq : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{7}})
        for (int64_t n : {int64_t{11}, int64_t{19}, int64_t{43}}) {
          SCOPED_TRACE(std::string(fc.name) + " D=" + std::to_string(D) +
                       " nq=" + std::to_string(nq) + " n=" + std::to_string(n));
          const int64_t stride_out = n + 2;
          const auto x = randn(n * D, 500 + D);
          const auto qs = randn(nq * D, 600 + D + nq);
          const auto w = randn(nq * stride_out, 700 + nq, 0.3);
          std::vector<float> dec;
          const auto buf = store_float_rows(fc.t, x, 1, dec);
          const uint8_t* rows = buf.data() + 1;
          const int64_t stride = D * fc.bytes;
          std::vector<float> many(static_cast<size_t>(nq * stride_out), -1.0f), one(many);
          vq::store::float_dot_rows_many(fc.t, rows, stride, n, D, qs.data(), nq, many.data(),
                                         stride_out);
          for (int64_t j = 0; j < nq; ++j)
            vq::store::float_dot_rows(fc.t, rows, stride, n, D, qs.data() + j * D,
                                      one.data() + j * stride_out);
          EXPECT_TRUE(same_bits(many.data(), one.data(), nq * stride_out)) << "dot";
          const auto acc0 = randn(nq * D, 800 + D, 0.1);
          std::vector<float> am = acc0, ao = acc0;
          vq::store::float_axpy_rows_many(fc.t, rows, stride, n, D, w.data(), stride_out, nq,
                                          am.data());
          for (int64_t j = 0; j < nq; ++j)
            vq::store::float_axpy_rows(fc.t, rows, stride, n, D, w.data() + j * stride_out,
                                       ao.data() + j * D);
          EXPECT_TRUE(same_bits(am.data(), ao.data(), nq * D)) << "axpy";
        }
}

TEST(AttentionKernels, FloatRowsMatchRefAndDequantizeThenAttend) {
  for (const FloatCase& fc : kFloat)
    for (int64_t D : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{13}, int64_t{40}, int64_t{64},
                      int64_t{128}, int64_t{131}})
      for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{33}})
        for (int64_t offset : {int64_t{0}, int64_t{1}, int64_t{3}}) {
          SCOPED_TRACE(std::string(fc.name) + " D=" + std::to_string(D) +
                       " n=" + std::to_string(n) + " offset=" + std::to_string(offset));
          const auto x = randn(n * D, 100 + D * 7 + n);
          const auto q = randn(D, 200 + D);
          const auto w = randn(n, 300 + n, 0.3);
          std::vector<float> dec;
          const auto buf = store_float_rows(fc.t, x, offset, dec);
          const uint8_t* rows = buf.data() + offset;
          const int64_t stride = D * fc.bytes;
          std::vector<double> want, mag;
          exact_dot(dec, n, D, q.data(), want, mag);
          std::vector<float> fast(static_cast<size_t>(n)), ref(fast.size());
          vq::store::float_dot_rows(fc.t, rows, stride, n, D, q.data(), fast.data());
          vq::store::float_dot_rows_ref(fc.t, rows, stride, n, D, q.data(), ref.data());
          expect_close(fast.data(), want, mag, D, "dot fast");
          expect_close(ref.data(), want, mag, D, "dot ref");
          // A row's value does not depend on where it sits or on how [0, n) is split.
          if (n > 2) {
            std::vector<float> parts(fast.size());
            vq::store::float_dot_rows(fc.t, rows, stride, 2, D, q.data(), parts.data());
            vq::store::float_dot_rows(fc.t, rows + 2 * stride, stride, n - 2, D, q.data(),
                                      parts.data() + 2);
            EXPECT_TRUE(same_bits(parts.data(), fast.data(), n));
          }
          const auto acc0 = randn(D, 400 + D, 0.1);
          exact_axpy(dec, n, D, w.data(), acc0, want, mag);
          std::vector<float> af = acc0, ar = acc0, as = acc0;
          vq::store::float_axpy_rows(fc.t, rows, stride, n, D, w.data(), af.data());
          vq::store::float_axpy_rows_ref(fc.t, rows, stride, n, D, w.data(), ar.data());
          expect_close(af.data(), want, mag, n, "axpy fast");
          expect_close(ar.data(), want, mag, n, "axpy ref");
          // Rows one call at a time give the same bits as one call over all of them.
          for (int64_t i = 0; i < n; ++i)
            vq::store::float_axpy_rows(fc.t, rows + i * stride, stride, 1, D, w.data() + i,
                                       as.data());
          EXPECT_TRUE(same_bits(as.data(), af.data(), D));
        }
}

// ---- q8_0 / q4_0 blocks

std::vector<uint8_t> quantize_rows(GgmlType t, int64_t block, const std::vector<float>& x,
                                   int64_t n, int64_t D, int64_t offset, std::vector<float>& dec) {
  const int64_t rb = D / block * vq::coding::ggml_block_bytes(t, block);
  std::vector<uint8_t> buf(static_cast<size_t>(offset + n * rb));
  vq::coding::ggml_quantize_blocks(t, block, x.data(), n * D, buf.data() + offset);
  dec.resize(static_cast<size_t>(n * D));
  vq::coding::ggml_dequantize_blocks(t, block, buf.data() + offset, n * D, dec.data());
  return buf;
}

// Blocks with every code value drawn at random (q8_0's -128 and q4_0's 0 and 15 included) and a
// random finite scale: byte patterns a quantizer rarely writes.
void randomize_codes(GgmlType t, int64_t block, uint8_t* p, int64_t blocks, uint64_t seed) {
  vq::Rng rng(seed);
  const int64_t bb = vq::coding::ggml_block_bytes(t, block);
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* blk = p + b * bb;
    const uint16_t h = vq::fp32_to_fp16(static_cast<float>(rng.uniform(-0.05, 0.05)));
    blk[0] = static_cast<uint8_t>(h & 0xFF);
    blk[1] = static_cast<uint8_t>(h >> 8);
    for (int64_t j = 2; j < bb; ++j) blk[j] = static_cast<uint8_t>(rng.below(256));
  }
}

// ggml_dot_rows_many / ggml_axpy_rows_many (a KV head's query group in one pass over q8_0 /
// q4_0 rows) give every query the bits of the one-query kernels, at every block size, with
// query counts that leave every group size, the head dims the kernels are compiled for (64, 128)
// and others, and row counts inside and past the AVX-512 q8_0 kernel's blocks of 16 rows.
TEST(AttentionKernels, GgmlBlocksManyEqualOneQueryAtATime) {
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0})
    for (int64_t block : {int64_t{32}, int64_t{16}, int64_t{8}})
      for (int64_t D : {block, int64_t{64}, int64_t{96}, int64_t{128}})
        for (int64_t nq : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{6}})
          for (int64_t n : {int64_t{11}, int64_t{37}}) {
            SCOPED_TRACE(std::string(t == GgmlType::Q8_0 ? "q8_0" : "q4_0") +
                         " block=" + std::to_string(block) + " D=" + std::to_string(D) +
                         " nq=" + std::to_string(nq) + " n=" + std::to_string(n));
            const int64_t so = n + 2;
            const auto x = randn(n * D, 900 + D + block, 2.0);
            const auto qs = randn(nq * D, 910 + D + nq);
            const auto w = randn(nq * so, 920 + nq, 0.3);
            std::vector<float> dec;
            auto buf = quantize_rows(t, block, x, n, D, 1, dec);
            const int64_t rb = D / block * vq::coding::ggml_block_bytes(t, block);
            const uint8_t* rows = buf.data() + 1;
            std::vector<float> many(static_cast<size_t>(nq * so), -1.0f), one(many);
            vq::coding::ggml_dot_rows_many(t, block, rows, rb, n, D, qs.data(), nq, many.data(),
                                           so);
            for (int64_t j = 0; j < nq; ++j)
              vq::coding::ggml_dot_rows(t, block, rows, rb, n, D, qs.data() + j * D,
                                        one.data() + j * so);
            EXPECT_TRUE(same_bits(many.data(), one.data(), nq * so)) << "dot";
            const auto acc0 = randn(nq * D, 930 + D, 0.1);
            std::vector<float> am = acc0, ao = acc0;
            vq::coding::ggml_axpy_rows_many(t, block, rows, rb, n, D, w.data(), so, nq, am.data());
            for (int64_t j = 0; j < nq; ++j)
              vq::coding::ggml_axpy_rows(t, block, rows, rb, n, D, w.data() + j * so,
                                         ao.data() + j * D);
            EXPECT_TRUE(same_bits(am.data(), ao.data(), nq * D)) << "axpy";
          }
}

TEST(AttentionKernels, GgmlBlocksMatchRefAndDequantizeThenAttend) {
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0})
    for (int64_t block : {int64_t{32}, int64_t{16}, int64_t{8}})
      for (int64_t D : {block, 2 * block, int64_t{96}, int64_t{128}})
        for (int64_t n : {int64_t{1}, int64_t{6}, int64_t{37}})
          for (int64_t offset : {int64_t{0}, int64_t{1}})
            for (bool raw : {false, true}) {
              if (D % block != 0) continue;
              SCOPED_TRACE(std::string(t == GgmlType::Q8_0 ? "q8_0" : "q4_0") +
                           " block=" + std::to_string(block) + " D=" + std::to_string(D) +
                           " n=" + std::to_string(n) + " offset=" + std::to_string(offset) +
                           (raw ? " random bytes" : ""));
              const auto x = randn(n * D, 500 + D + n + block, 2.0);
              const auto q = randn(D, 600 + D);
              const auto w = randn(n, 700 + n, 0.3);
              std::vector<float> dec;
              auto buf = quantize_rows(t, block, x, n, D, offset, dec);
              const int64_t rb = D / block * vq::coding::ggml_block_bytes(t, block);
              if (raw) {
                randomize_codes(t, block, buf.data() + offset, n * D / block, 800 + D + n);
                vq::coding::ggml_dequantize_blocks(t, block, buf.data() + offset, n * D,
                                                   dec.data());
              }
              const uint8_t* rows = buf.data() + offset;
              std::vector<double> want, mag;
              exact_dot(dec, n, D, q.data(), want, mag);
              std::vector<float> fast(static_cast<size_t>(n)), ref(fast.size());
              vq::coding::ggml_dot_rows(t, block, rows, rb, n, D, q.data(), fast.data());
              vq::coding::ggml_dot_rows_ref(t, block, rows, rb, n, D, q.data(), ref.data());
              expect_close(fast.data(), want, mag, D, "dot fast");
              expect_close(ref.data(), want, mag, D, "dot ref");
              if (n > 2) {  // split / position invariance
                std::vector<float> parts(fast.size());
                vq::coding::ggml_dot_rows(t, block, rows + rb, rb, n - 1, D, q.data(),
                                          parts.data() + 1);
                vq::coding::ggml_dot_rows(t, block, rows, rb, 1, D, q.data(), parts.data());
                EXPECT_TRUE(same_bits(parts.data(), fast.data(), n));
              }
              // The query rounded to q8_0: the integer per-block dot against the dequantized
              // query.
              std::vector<uint8_t> q8(static_cast<size_t>(
                  D / block * vq::coding::ggml_block_bytes(GgmlType::Q8_0, block)));
              vq::coding::ggml_quantize_blocks(GgmlType::Q8_0, block, q.data(), D, q8.data());
              std::vector<float> qd(static_cast<size_t>(D));
              vq::coding::ggml_dequantize_blocks(GgmlType::Q8_0, block, q8.data(), D, qd.data());
              exact_dot(dec, n, D, qd.data(), want, mag);
              vq::coding::ggml_dot_rows_q8(t, block, rows, rb, n, D, q8.data(), fast.data());
              vq::coding::ggml_dot_rows_q8_ref(t, block, rows, rb, n, D, q8.data(), ref.data());
              expect_close(fast.data(), want, mag, D, "q8 dot fast");
              expect_close(ref.data(), want, mag, D, "q8 dot ref");
              // Values.
              const auto acc0 = randn(D, 900 + D, 0.1);
              exact_axpy(dec, n, D, w.data(), acc0, want, mag);
              std::vector<float> af = acc0, ar = acc0, as = acc0;
              vq::coding::ggml_axpy_rows(t, block, rows, rb, n, D, w.data(), af.data());
              vq::coding::ggml_axpy_rows_ref(t, block, rows, rb, n, D, w.data(), ar.data());
              expect_close(af.data(), want, mag, n + 1, "axpy fast");
              expect_close(ar.data(), want, mag, n + 1, "axpy ref");
              for (int64_t i = 0; i < n; ++i)
                vq::coding::ggml_axpy_rows(t, block, rows + i * rb, rb, 1, D, w.data() + i,
                                           as.data());
              EXPECT_TRUE(same_bits(as.data(), af.data(), D));
            }
}

// The q8_0 key codec with quant_q: dot_rows rounds the query itself and agrees with attention
// over the rounded query (what the engine did before: q rounded to q8_0 floats, then a float dot
// with the dequantized keys).
TEST(AttentionKernels, QuantQueryCodecRoundsTheQueryLikeLlamaCpp) {
  const int64_t D = 64, n = 9;
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0})
    for (int64_t block : {int64_t{32}, int64_t{8}}) {
      vq::codecs::GgmlCodec rounding(t, D, block, true, true), plain(t, D, block, false, true);
      ASSERT_TRUE(rounding.quantizes_queries());
      const auto x = randn(n * D, 31, 1.5);
      const auto q = randn(D, 32);
      std::vector<uint8_t> codes(static_cast<size_t>(n * rounding.row_bytes()));
      rounding.encode(x.data(), n, nullptr, codes.data());
      std::vector<float> dec(static_cast<size_t>(n * D));
      rounding.decode(nullptr, codes.data(), n, dec.data());
      std::vector<float> qr(static_cast<size_t>(D));
      for (int64_t b0 = 0; b0 < D; b0 += block) {  // llama.cpp's q8_0 rounding of the query
        float amax = 0.0f;
        for (int64_t j = 0; j < block; ++j)
          amax = std::max(amax, std::fabs(q[static_cast<size_t>(b0 + j)]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int64_t j = 0; j < block; ++j)
          qr[static_cast<size_t>(b0 + j)] =
              std::round(q[static_cast<size_t>(b0 + j)] * id) * vq::round_to_fp16(d);
      }
      std::vector<double> want, mag;
      exact_dot(dec, n, D, qr.data(), want, mag);
      std::vector<float> got(static_cast<size_t>(n)), unrounded(got.size());
      rounding.dot_rows(nullptr, codes.data(), n, q.data(), got.data());
      expect_close(got.data(), want, mag, D, "quant_q");
      plain.dot_rows(nullptr, codes.data(), n, q.data(), unrounded.data());
      EXPECT_FALSE(same_bits(got.data(), unrounded.data(), n));  // the rounding is applied
    }
}

// KIVI on its packed codes: dot_rows / axpy_rows against the base class's twin (decode into
// scratch, then the fp32 kernel) and dequantize-then-attend, keys (per-channel parameters of the
// chunk) and values (per-token groups, a partial last group included).
TEST(AttentionKernels, KiviOnPackedCodesMatchesDequantizeThenAttend) {
  for (int bits : {2, 4})
    for (int64_t D : {int64_t{48}, int64_t{64}, int64_t{13}})
      for (bool keys : {true, false}) {
        SCOPED_TRACE("bits=" + std::to_string(bits) + " D=" + std::to_string(D) +
                     (keys ? " keys" : " values"));
        const int64_t n = 11, group = 32;
        vq::codecs::KiviCodec c(D, keys, bits, group, 0);
        const auto x = randn(n * D, 61 + D, 1.3);
        const auto q = randn(D, 62), w = randn(n, 63, 0.2);
        std::vector<uint8_t> params(static_cast<size_t>(c.chunk_param_bytes(n)) + 1),
            codes(static_cast<size_t>(n * c.row_bytes()) + 1);
        // one byte in: codes and parameters at odd addresses
        c.encode(x.data(), n, params.data() + 1, codes.data() + 1);
        std::vector<float> dec(static_cast<size_t>(n * D));
        c.decode(params.data() + 1, codes.data() + 1, n, dec.data());
        std::vector<double> want, mag;
        exact_dot(dec, n, D, q.data(), want, mag);
        std::vector<float> got(static_cast<size_t>(n)), twin(got.size());
        c.dot_rows(params.data() + 1, codes.data() + 1, n, q.data(), got.data());
        c.RowCodec::dot_rows(params.data() + 1, codes.data() + 1, n, q.data(), twin.data());
        expect_close(twin.data(), want, mag, D, "decode-then-dot twin");
        // The folded sums split each value into min + code * scale (|both| <= 3 max|x|), so their
        // rounding is bounded by those terms rather than by |x_c q_c|.
        double xmax = 0, qabs = 0;
        for (float v : dec) xmax = std::max(xmax, std::fabs(static_cast<double>(v)));
        for (float v : q) qabs += std::fabs(static_cast<double>(v));
        const std::vector<double> split_mag(static_cast<size_t>(n), 3.0 * xmax * qabs);
        expect_close(got.data(), want, split_mag, 2 * D, "kivi dot");
        const std::vector<float> acc0(static_cast<size_t>(D), -0.5f);
        exact_axpy(dec, n, D, w.data(), acc0, want, mag);
        std::vector<float> acc = acc0, acc_twin = acc0;
        c.axpy_rows(params.data() + 1, codes.data() + 1, n, w.data(), acc.data());
        c.RowCodec::axpy_rows(params.data() + 1, codes.data() + 1, n, w.data(), acc_twin.data());
        expect_close(acc.data(), want, mag, n + 2, "kivi axpy");
        expect_close(acc_twin.data(), want, mag, n + 1, "twin axpy");
      }
}

// The PCA family attends in the latent space (kvtc, uniform, svdq_split: PcaCodec): dot_rows /
// axpy_rows against the decode-then-attend twins and dequantize-then-attend in double, for bit
// budgets that keep every component, drop some (0 bits) and drop all; the projected query is
// memoized per thread, so a second query must not reuse the first one's projection.
TEST(AttentionKernels, PcaLatentSpaceMatchesDequantizeThenAttend) {
  const int64_t D = 32, n = 40;
  for (const char* spec : {"kvtc:bit_budget=256", "kvtc:bit_budget=40", "kvtc:bit_budget=0",
                           "uniform:bit_budget=64", "svdq_split:bit_budget=48"}) {
    SCOPED_TRACE(spec);
    const vq::CacheConfig cfg = vq::CacheConfig::parse(spec);
    for (int kv = 0; kv < 2; ++kv) {
      auto c = vq::find_method(cfg.method())
                   .make_row_codec(cfg, vq::store::StreamInfo{D, 0, 0, 1, kv, 7});
      ASSERT_GT(c->chunk_rows(), 0);
      const auto x = correlated_rows(n, D, 71 + kv, 73);
      c->fit(x.data(), n);
      const int64_t m = std::min<int64_t>(n, c->chunk_rows());
      std::vector<uint8_t> params(static_cast<size_t>(c->chunk_param_bytes(m)) + 1),
          codes(static_cast<size_t>(m * c->row_bytes()) + 1);
      c->encode(x.data(), m, params.data() + 1, codes.data() + 1);
      std::vector<float> dec(static_cast<size_t>(m * D));
      c->decode(params.data() + 1, codes.data() + 1, m, dec.data());
      double xmax = 0;
      for (float v : dec) xmax = std::max(xmax, std::fabs(static_cast<double>(v)));
      for (uint64_t qs : {81u, 82u, 81u}) {  // a new query, then the first one again
        const auto q = randn(D, qs), w = randn(m, qs + 10, 0.2);
        std::vector<double> want, mag;
        exact_dot(dec, m, D, q.data(), want, mag);
        std::vector<float> got(static_cast<size_t>(m)), twin(got.size());
        c->dot_rows(params.data() + 1, codes.data() + 1, m, q.data(), got.data());
        c->RowCodec::dot_rows(params.data() + 1, codes.data() + 1, m, q.data(), twin.data());
        expect_close(twin.data(), want, mag, D, "decode-then-dot twin");
        // latent terms (min_j + code_j scale_j) q'_j: bounded by the latents' size, not |x_d q_d|
        double qabs = 0;
        for (float v : q) qabs += std::fabs(static_cast<double>(v));
        const std::vector<double> lat_mag(static_cast<size_t>(m), 4.0 * xmax * qabs);
        expect_close(got.data(), want, lat_mag, 4 * D, "latent dot");
        // a row's value depends on its codes and q only, not on the run it is read in (the
        // vector path takes eight rows at a time, the scalar one the rest)
        for (int64_t t = 0; t < m; ++t) {
          float one = 0.0f;
          c->dot_rows(params.data() + 1, codes.data() + 1 + t * c->row_bytes(), 1, q.data(), &one);
          ASSERT_EQ(one, got[static_cast<size_t>(t)]) << "row " << t;
        }
        const std::vector<float> acc0(static_cast<size_t>(D), 0.25f);
        exact_axpy(dec, m, D, w.data(), acc0, want, mag);
        double wabs = 0;
        for (float v : w) wabs += std::fabs(static_cast<double>(v));
        const std::vector<double> acc_mag(static_cast<size_t>(D), 4.0 * xmax * wabs + 0.25);
        std::vector<float> acc = acc0;
        c->axpy_rows(params.data() + 1, codes.data() + 1, m, w.data(), acc.data());
        expect_close(acc.data(), want, acc_mag, 4 * (m + D), "latent axpy");
      }
    }
  }
}

// The latent kernels (AVX2; and on AVX-512 VBMI targets two rows, or two component groups, per
// 512-bit register) equal their scalar models bit for bit: dot_rows / dot_rows_many against
// dot_rows_lanes_ref (eight lane sums in a fixed order), axpy_latent / axpy_latent_many against
// axpy_latent_ref (rows in order per component). The cases cover rows that fit 64 bytes as a
// pair (rb <= 32), as a group window pair (rb <= 55) and neither, runs of rows that are not a
// multiple of the kernels' steps, every batch size, widths up to 8 bits, and no kept component.
// The codes sit in a buffer that ends where the last row does: a kernel may not read past it.
TEST(AttentionKernels, PcaLatentKernelsEqualTheirScalarOrder) {
  struct Case {
    const char* spec;
    int64_t D;
  };
  const Case cases[] = {{"kvtc", 64},
                        {"kvtc:bit_budget=40", 32},
                        {"kvtc:bit_budget=0", 32},
                        {"kvtc:bit_budget=384", 128},
                        {"kvtc:bit_budget=512", 128},
                        {"kvtc:bit_budget=1024", 128},
                        {"uniform:bit_budget=256", 64},
                        {"kvtc:bit_budget=64,bit_choices=0,8", 16}};
  bool pair_whole = false, pair_window = false, no_pair = false;
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.spec);
    const int64_t D = cs.D, n = 200;
    const vq::CacheConfig cfg = vq::CacheConfig::parse(cs.spec);
    for (int kv = 0; kv < 2; ++kv) {
      auto rc = vq::find_method(cfg.method())
                    .make_row_codec(cfg, vq::store::StreamInfo{D, 0, 0, 1, kv, 7});
      const auto x = correlated_rows(n, D, 91 + kv, 93);
      rc->fit(x.data(), n);
      const auto* c = dynamic_cast<const vq::codecs::PcaCodec*>(rc.get());
      ASSERT_NE(c, nullptr);
      const int64_t rb = c->row_bytes();
      if (c->kept() > 0) {
        pair_whole |= 2 * rb <= 64;
        pair_window |= 2 * rb > 64 && rb + 9 <= 64;
        no_pair |= rb + 9 > 64;
      }
      const int64_t m = std::min<int64_t>(n, c->chunk_rows());
      std::vector<uint8_t> params(static_cast<size_t>(c->chunk_param_bytes(m)) + 1);
      std::vector<uint8_t> all(static_cast<size_t>(m * rb));
      rc->encode(x.data(), m, params.data() + 1, all.data());
      for (int64_t rows : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{8}, int64_t{9},
                           int64_t{17}, int64_t{40}, m}) {
        if (rows > m) continue;
        SCOPED_TRACE(rows);
        // the last `rows` rows of the chunk, copied to a buffer of exactly their size
        const std::vector<uint8_t> codes(all.end() - rows * rb, all.end());
        const int64_t nq = 9;
        const auto qs = randn(nq * D, 95 + static_cast<uint64_t>(rows));
        const auto w = randn(nq * rows, 97 + static_cast<uint64_t>(rows), 0.2);
        std::vector<float> want(static_cast<size_t>(nq * rows)), got(want.size());
        for (int64_t j = 0; j < nq; ++j)
          c->dot_rows_lanes_ref(params.data() + 1, codes.data(), rows, qs.data() + j * D,
                                want.data() + j * rows);
        c->dot_rows(params.data() + 1, codes.data(), rows, qs.data(), got.data());
        EXPECT_TRUE(same_bits(got.data(), want.data(), rows)) << "dot_rows";
        for (int64_t b = 1; b <= nq; ++b) {
          std::fill(got.begin(), got.end(), -1.0f);
          c->dot_rows_many(params.data() + 1, codes.data(), rows, qs.data(), b, got.data(), rows);
          EXPECT_TRUE(same_bits(got.data(), want.data(), b * rows)) << "dot_rows_many " << b;
        }
        const int64_t L = c->latent_dim();
        std::vector<float> lat_want(static_cast<size_t>(nq * L)), lat_got(lat_want.size());
        for (int64_t j = 0; j < nq; ++j) {
          std::fill(lat_want.begin() + j * L, lat_want.begin() + (j + 1) * L, 0.125f);
          c->axpy_latent_ref(params.data() + 1, codes.data(), rows, w.data() + j * rows,
                             lat_want.data() + j * L);
        }
        std::fill(lat_got.begin(), lat_got.end(), 0.125f);
        c->axpy_latent(params.data() + 1, codes.data(), rows, w.data(), lat_got.data());
        EXPECT_TRUE(same_bits(lat_got.data(), lat_want.data(), L)) << "axpy_latent";
        for (int64_t b = 1; b <= nq; ++b) {
          std::fill(lat_got.begin(), lat_got.end(), 0.125f);
          c->axpy_latent_many(params.data() + 1, codes.data(), rows, w.data(), rows, b,
                              lat_got.data(), L);
          EXPECT_TRUE(same_bits(lat_got.data(), lat_want.data(), b * L))
              << "axpy_latent_many " << b;
        }
      }
    }
  }
  EXPECT_TRUE(pair_whole && pair_window && no_pair) << "a row size range went untested";
}

// ---- the store: RowSource::dot / accumulate on every kind of row placement

struct StoreCase {
  const char* name;
  std::function<std::unique_ptr<vq::store::RowCodec>(int kv)> make;
  // accumulate sums a call's encoded rows in the codec's latent space and maps back once per
  // call, so a read cut into blocks rounds differently (within tolerance) from one call
  bool latent = false;
};

std::vector<StoreCase> store_cases(int64_t D) {
  using namespace vq;
  return {
      {"fp16", [D](int) { return std::make_unique<store::Fp16Codec>(D); }},
      {"bf16", [D](int) { return std::make_unique<store::Bf16Codec>(D); }},
      {"f32", [D](int) { return std::make_unique<store::Fp32Codec>(D); }},
      {"q8_0",
       [D](int kv) {
         return std::make_unique<codecs::GgmlCodec>(GgmlType::Q8_0, D, 32, false, kv == 0);
       }},
      {"q4_0:block=8",
       [D](int kv) {
         return std::make_unique<codecs::GgmlCodec>(GgmlType::Q4_0, D, 8, false, kv == 0);
       }},
      // chunked: chunks of 8 rows, 5 recent rows at fp16 in the window (runs of both kinds)
      {"kivi (chunked)",
       [D](int kv) { return std::make_unique<codecs::KiviCodec>(D, kv == 0, 2, 8, 5); }},
      {"fp16 chunked", [D](int) { return std::make_unique<store::Fp16Codec>(D, 8, 5); }},
      // the PCA family: fitted on the first 16 rows, chunks of 8, latent-space attention
      {"kvtc (chunked, latent)",
       [D](int kv) {
         const CacheConfig c =
             CacheConfig::parse("kvtc:bit_budget=192,chunk_tokens=8,fit_tokens=16");
         return find_method("kvtc").make_row_codec(c, store::StreamInfo{D, 0, 0, 1, kv, 5});
       },
       true},
  };
}

TEST(StoreAttention, DotAndAccumulateEqualReadThenAttend) {
  const int64_t D = 64, n = 61;
  for (const StoreCase& sc : store_cases(D)) {
    SCOPED_TRACE(sc.name);
    vq::store::HeadStore hs(sc.make(0), sc.make(1));
    const auto k = randn(n * D, 41, 1.5), v = randn(n * D, 42);
    for (int64_t t = 0; t < n; ++t) {
      hs.append(k.data() + t * D, v.data() + t * D, t);
      if (t % 9 == 8) hs.settle();
    }
    hs.settle();
    for (int64_t slot : {int64_t{3}, int64_t{17}, int64_t{40}, int64_t{0}}) hs.remove(slot);
    const int64_t m = hs.size();
    const auto q = randn(D, 43);
    const auto w = randn(m, 44, 0.2);
    for (int kv = 0; kv < 2; ++kv) {
      const vq::store::RowSource& src = kv == 0 ? hs.keys() : hs.values();
      std::vector<float> dec(static_cast<size_t>(m * D));
      src.read(0, m, dec.data());
      std::vector<double> want, mag;
      exact_dot(dec, m, D, q.data(), want, mag);
      std::vector<float> got(static_cast<size_t>(m)), parts(got.size());
      src.dot(0, m, q.data(), got.data());
      // latent scores: a query's weights are rounded to 16-bit levels against codes moved up to
      // 8 bits (PcaCodec::dot_rows: at most 255 k step / 2, step 2^-15 of the largest weight
      // per unit of code); here about 1e-5 of mag (fp32 rounding allows 8e-6): allow 1.2e-4
      expect_close(got.data(), want, mag, sc.latent ? D + 1024 : D, "store dot");
      for (int64_t f = 0; f < m; f += 7)  // blocks that cut runs and chunks anywhere
        src.dot(f, std::min<int64_t>(7, m - f), q.data(), parts.data() + f);
      EXPECT_TRUE(same_bits(parts.data(), got.data(), m));
      const std::vector<float> acc0(static_cast<size_t>(D), 0.25f);
      exact_axpy(dec, m, D, w.data(), acc0, want, mag);
      std::vector<float> acc = acc0, acc_parts = acc0;
      src.accumulate(0, m, w.data(), acc.data());
      expect_close(acc.data(), want, mag, m + 1, "store accumulate");
      for (int64_t f = 0; f < m; f += 7)
        src.accumulate(f, std::min<int64_t>(7, m - f), w.data() + f, acc_parts.data());
      if (sc.latent)
        expect_close(acc_parts.data(), want, mag, m + 1, "store accumulate in blocks");
      else
        EXPECT_TRUE(same_bits(acc_parts.data(), acc.data(), D));
    }
    std::vector<float> out(1);
    EXPECT_THROW(hs.keys().dot(m - 1, 2, q.data(), out.data()), vq::InvalidArgument);
  }
}

// dot_many / accumulate_many (the query heads of one KV head at once) give every query the bits
// dot / accumulate give it alone, for every store kind, any query count (batches of up to 8
// and a remainder) and reads cut into blocks.
TEST(StoreAttention, ManyQueriesEqualOneAtATime) {
  const int64_t D = 64, n = 61;
  for (const StoreCase& sc : store_cases(D)) {
    SCOPED_TRACE(sc.name);
    vq::store::HeadStore hs(sc.make(0), sc.make(1));
    const auto k = randn(n * D, 61, 1.5), v = randn(n * D, 62);
    for (int64_t t = 0; t < n; ++t) {
      hs.append(k.data() + t * D, v.data() + t * D, t);
      if (t % 9 == 8) hs.settle();
    }
    hs.settle();
    hs.remove(11);
    const int64_t m = hs.size();
    for (int64_t nq : {1, 2, 3, 4, 5, 8, 9, 13}) {
      SCOPED_TRACE(nq);
      const auto qs = randn(nq * D, 63 + static_cast<uint64_t>(nq));
      const int64_t stride = m + 3;  // rows of results and weights with a gap between them
      const auto w = randn(nq * stride, 70 + static_cast<uint64_t>(nq), 0.2);
      for (int kv = 0; kv < 2; ++kv) {
        const vq::store::RowSource& src = kv == 0 ? hs.keys() : hs.values();
        for (int64_t blk : {m, int64_t{7}}) {
          std::vector<float> many(static_cast<size_t>(nq * stride), -1.0f), one(many);
          for (int64_t f = 0; f < m; f += blk) {
            const int64_t c = std::min(blk, m - f);
            src.dot_many(f, c, qs.data(), nq, many.data() + f, stride);
            for (int64_t j = 0; j < nq; ++j)
              src.dot(f, c, qs.data() + j * D, one.data() + j * stride + f);
          }
          EXPECT_TRUE(same_bits(many.data(), one.data(), nq * stride)) << "dot, blocks " << blk;
          std::vector<float> acc_many(static_cast<size_t>(nq * D), 0.25f), acc_one(acc_many);
          for (int64_t f = 0; f < m; f += blk) {
            const int64_t c = std::min(blk, m - f);
            src.accumulate_many(f, c, w.data() + f, stride, nq, acc_many.data());
            for (int64_t j = 0; j < nq; ++j)
              src.accumulate(f, c, w.data() + j * stride + f, acc_one.data() + j * D);
          }
          EXPECT_TRUE(same_bits(acc_many.data(), acc_one.data(), nq * D))
              << "accumulate, blocks " << blk;
        }
      }
    }
  }
}

TEST(StoreAttention, DefaultAndConcatSourcesAgree) {
  const int64_t D = 24, na = 300, nb = 9;  // a longer than one scratch block
  const auto a = randn(na * D, 51), b = randn(nb * D, 52), q = randn(D, 53);
  const auto w = randn(na + nb, 54, 0.1);
  vq::store::Fp32Rows ra(a.data(), na, D), rb(b.data(), nb, D);
  vq::store::ConcatRows both(ra, rb);
  std::vector<float> all(a);
  all.insert(all.end(), b.begin(), b.end());
  vq::store::Fp32Rows rall(all.data(), na + nb, D);
  std::vector<float> x(static_cast<size_t>(na + nb)), y(x.size());
  both.dot(0, na + nb, q.data(), x.data());
  rall.dot(0, na + nb, q.data(), y.data());
  EXPECT_TRUE(same_bits(x.data(), y.data(), na + nb));
  std::vector<double> want, mag;
  exact_dot(all, na + nb, D, q.data(), want, mag);
  expect_close(x.data(), want, mag, D, "default dot");
  std::vector<float> p(2);
  both.dot(na - 1, 2, q.data(), p.data());  // across the seam
  EXPECT_TRUE(same_bits(p.data(), x.data() + na - 1, 2));
  std::vector<float> s(static_cast<size_t>(D), 0.0f), t(s);
  both.accumulate(0, na + nb, w.data(), s.data());
  rall.accumulate(0, na + nb, w.data(), t.data());
  EXPECT_TRUE(same_bits(s.data(), t.data(), D));
}

}  // namespace

// GGUF reader: metadata of every type, tensor infos, alignment, dequantization of every
// supported type against values computed from the logical codes, hostile files, and the real
// stories260K.gguf against its llama2.c .bin.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "coding/ggml_blocks.hpp"
#include "formats/file_writers.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/gguf.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/safetensors.hpp"
#include "veloxquant/tensor.hpp"
#include "veloxquant/tokenizers.hpp"

namespace {

using vqtest::Bytes;
using vqtest::GgufWriter;

vq::GgufFile parse(const Bytes& b) {
  return vq::GgufFile::parse(vq::MappedFile::from_bytes(b.data(), b.size(), "test.gguf"));
}

std::string refusal(const Bytes& b) {
  try {
    parse(b);
  } catch (const vq::FormatError& e) {
    return e.what();
  }
  return "<accepted>";
}

struct Lcg {
  uint64_t s;
  explicit Lcg(uint64_t seed) : s(seed * 2862933555777941757ull + 3037000493ull) {}
  uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 33);
  }
  int range(int lo, int hi) {
    return lo + static_cast<int>(next() % static_cast<uint32_t>(hi - lo + 1));
  }
};

void put16(Bytes& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v & 0xFF);
  b[at + 1] = static_cast<uint8_t>(v >> 8);
}

// One quantized tensor built from random logical codes, with the values those codes mean.
struct Quantized {
  uint32_t type;
  Bytes bytes;
  std::vector<double> expect;
};

// Pack `blocks` blocks of type `t` from random codes; `expect` from the format's formulas.
Quantized make_quantized(vq::GgmlType t, int blocks, uint64_t seed) {
  Lcg r(seed);
  Quantized q{static_cast<uint32_t>(t), {}, {}};
  auto half = [&](double lo, double hi) {
    const float f = static_cast<float>(lo + (hi - lo) * (r.next() % 10000) / 10000.0);
    return vq::fp32_to_fp16(f);
  };
  for (int blk = 0; blk < blocks; ++blk) {
    switch (t) {
      case vq::GgmlType::Q8_0: {
        Bytes b(34);
        const uint16_t d = half(-0.05, 0.05);
        put16(b, 0, d);
        for (int j = 0; j < 32; ++j) {
          const int c = r.range(-128, 127);
          b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(c));
          q.expect.push_back(double(vq::fp16_to_fp32(d)) * c);
        }
        q.bytes.insert(q.bytes.end(), b.begin(), b.end());
        break;
      }
      case vq::GgmlType::Q4_0:
      case vq::GgmlType::Q4_1:
      case vq::GgmlType::Q5_0:
      case vq::GgmlType::Q5_1: {
        const bool has_min = t == vq::GgmlType::Q4_1 || t == vq::GgmlType::Q5_1;
        const bool five = t == vq::GgmlType::Q5_0 || t == vq::GgmlType::Q5_1;
        const uint16_t d = half(-0.1, 0.1), m = half(-1, 1);
        int code[32];
        for (int& c : code) c = r.range(0, five ? 31 : 15);
        Bytes b;
        b.resize(2);
        put16(b, 0, d);
        if (has_min) {
          b.resize(4);
          put16(b, 2, m);
        }
        if (five) {
          uint32_t hi = 0;
          for (int j = 0; j < 32; ++j) hi |= static_cast<uint32_t>(code[j] >> 4) << j;
          for (int k = 0; k < 4; ++k) b.push_back(static_cast<uint8_t>(hi >> (8 * k)));
        }
        for (int j = 0; j < 16; ++j)
          b.push_back(static_cast<uint8_t>((code[j] & 15) | ((code[j + 16] & 15) << 4)));
        const double dd = vq::fp16_to_fp32(d), mm = vq::fp16_to_fp32(m);
        for (int j = 0; j < 32; ++j) {
          if (has_min)
            q.expect.push_back(dd * code[j] + mm);
          else
            q.expect.push_back(dd * (code[j] - (five ? 16 : 8)));
        }
        q.bytes.insert(q.bytes.end(), b.begin(), b.end());
        break;
      }
      case vq::GgmlType::Q4_K:
      case vq::GgmlType::Q5_K: {
        const bool five = t == vq::GgmlType::Q5_K;
        const uint16_t d = half(0.001, 0.02), dmin = half(0.001, 0.02);
        int sc[8], mn[8], code[256];
        for (int s = 0; s < 8; ++s) {
          sc[s] = r.range(0, 63);
          mn[s] = r.range(0, 63);
        }
        for (int& c : code) c = r.range(0, five ? 31 : 15);
        Bytes b(4 + 12);
        put16(b, 0, d);
        put16(b, 2, dmin);
        for (int s = 0; s < 4; ++s) {
          b[4 + s] = static_cast<uint8_t>((sc[s] & 63) | ((sc[s + 4] >> 4) << 6));
          b[4 + s + 4] = static_cast<uint8_t>((mn[s] & 63) | ((mn[s + 4] >> 4) << 6));
          b[4 + s + 8] = static_cast<uint8_t>((sc[s + 4] & 15) | ((mn[s + 4] & 15) << 4));
        }
        if (five) {
          for (int l = 0; l < 32; ++l) {
            uint8_t h = 0;
            for (int s = 0; s < 8; ++s)
              h |= static_cast<uint8_t>(((code[32 * s + l] >> 4) & 1) << s);
            b.push_back(h);
          }
        }
        for (int c = 0; c < 4; ++c)
          for (int l = 0; l < 32; ++l)
            b.push_back(static_cast<uint8_t>((code[64 * c + l] & 15) |
                                             ((code[64 * c + 32 + l] & 15) << 4)));
        const double dd = vq::fp16_to_fp32(d), dm = vq::fp16_to_fp32(dmin);
        for (int i = 0; i < 256; ++i)
          q.expect.push_back(dd * sc[i / 32] * code[i] - dm * mn[i / 32]);
        q.bytes.insert(q.bytes.end(), b.begin(), b.end());
        break;
      }
      case vq::GgmlType::Q6_K: {
        int code[256];
        int8_t scales[16];
        for (int& c : code) c = r.range(0, 63);
        for (int8_t& s : scales) s = static_cast<int8_t>(r.range(-128, 127));
        const uint16_t d = half(-0.01, 0.01);
        Bytes b(210, 0);
        for (int h = 0; h < 2; ++h) {
          const int o = 128 * h;
          for (int l = 0; l < 32; ++l) {
            b[64 * h + l] =
                static_cast<uint8_t>((code[o + l] & 15) | ((code[o + 64 + l] & 15) << 4));
            b[64 * h + 32 + l] =
                static_cast<uint8_t>((code[o + 32 + l] & 15) | ((code[o + 96 + l] & 15) << 4));
            b[128 + 32 * h + l] = static_cast<uint8_t>(
                (code[o + l] >> 4) | ((code[o + 32 + l] >> 4) << 2) |
                ((code[o + 64 + l] >> 4) << 4) | ((code[o + 96 + l] >> 4) << 6));
          }
        }
        for (int g = 0; g < 16; ++g) b[192 + g] = static_cast<uint8_t>(scales[g]);
        put16(b, 208, d);
        const double dd = vq::fp16_to_fp32(d);
        for (int i = 0; i < 256; ++i) q.expect.push_back(dd * scales[i / 16] * (code[i] - 32));
        q.bytes.insert(q.bytes.end(), b.begin(), b.end());
        break;
      }
      case vq::GgmlType::F16:
      case vq::GgmlType::BF16: {
        for (int j = 0; j < 32; ++j) {
          const float f =
              static_cast<float>(r.range(-255, 255)) / 16.0f;  // 8 significant bits: exact in both
          uint16_t h;
          if (t == vq::GgmlType::F16) {
            h = vq::fp32_to_fp16(f);
          } else {
            uint32_t bits;
            std::memcpy(&bits, &f, 4);
            h = static_cast<uint16_t>(bits >> 16);
          }
          q.bytes.push_back(static_cast<uint8_t>(h & 0xFF));
          q.bytes.push_back(static_cast<uint8_t>(h >> 8));
          q.expect.push_back(f);
        }
        break;
      }
      default:
        ADD_FAILURE() << "no packer";
    }
  }
  return q;
}

const vq::GgmlType kQuantTypes[] = {vq::GgmlType::F16,  vq::GgmlType::BF16, vq::GgmlType::Q8_0,
                                    vq::GgmlType::Q4_0, vq::GgmlType::Q4_1, vq::GgmlType::Q5_0,
                                    vq::GgmlType::Q5_1, vq::GgmlType::Q4_K, vq::GgmlType::Q5_K,
                                    vq::GgmlType::Q6_K};

TEST(Gguf, DequantizeEveryTypeMatchesTheFormatFormulas) {
  for (vq::GgmlType t : kQuantTypes) {
    const int64_t bv = vq::ggml_block_values(t);
    const int blocks = bv == 1 ? 1 : 3;
    const Quantized q = make_quantized(t, blocks, 7 + static_cast<uint64_t>(t));
    const int64_t n = static_cast<int64_t>(q.expect.size());
    ASSERT_EQ(vq::ggml_row_bytes(t, n), q.bytes.size()) << vq::ggml_type_name(q.type);
    std::vector<float> got(static_cast<size_t>(n));
    vq::ggml_dequantize(t, q.bytes.data(), got.data(), n);
    int bad = 0;
    for (int64_t i = 0; i < n; ++i)
      if (std::fabs(got[i] - q.expect[i]) > 1e-6 * std::fabs(q.expect[i]) + 1e-9 && bad++ < 3)
        ADD_FAILURE() << vq::ggml_type_name(q.type) << " value " << i << ": got " << got[i]
                      << " want " << q.expect[i];
    EXPECT_EQ(bad, 0) << vq::ggml_type_name(q.type);
  }
}

// The repository's KV-cache q8_0 / q4_0 codec is a separate implementation of the same blocks.
TEST(Gguf, Q8_0AndQ4_0AgreeWithTheKvCodec) {
  Lcg r(3);
  std::vector<float> x(256);
  for (float& v : x) v = static_cast<float>(r.range(-5000, 5000)) / 1000.0f;
  for (auto [kv, gg] : {std::pair{vq::coding::GgmlType::Q8_0, vq::GgmlType::Q8_0},
                        std::pair{vq::coding::GgmlType::Q4_0, vq::GgmlType::Q4_0}}) {
    Bytes blocks(static_cast<size_t>(vq::coding::ggml_row_bytes(kv, 256)));
    vq::coding::ggml_quantize_row(kv, x.data(), 256, blocks.data());
    std::vector<float> a(256), b(256);
    vq::coding::ggml_dequantize_row(kv, blocks.data(), 256, a.data());
    vq::ggml_dequantize(gg, blocks.data(), b.data(), 256);
    EXPECT_EQ(a, b) << vq::ggml_type_name(static_cast<uint32_t>(gg));
  }
}

// A file with one key of every type and one tensor of every supported type.
GgufWriter full_writer() {
  GgufWriter w;
  w.kv<uint8_t>("t.u8", 0, 200);
  w.kv<int8_t>("t.i8", 1, -100);
  w.kv<uint16_t>("t.u16", 2, 60000);
  w.kv<int16_t>("t.i16", 3, -30000);
  w.kv<uint32_t>("t.u32", 4, 4000000000u);
  w.kv<int32_t>("t.i32", 5, -2000000000);
  w.kv<float>("t.f32", 6, 1.5f);
  w.kv<uint8_t>("t.bool", 7, 1);
  w.kv_string("general.architecture", "llama");
  w.kv<uint64_t>("t.u64", 10, 1ull << 40);
  w.kv<int64_t>("t.i64", 11, -(1ll << 40));
  w.kv<double>("t.f64", 12, 0.25);
  w.kv_array<float>("t.farr", 6, {1.0f, 2.0f, 3.0f});
  w.kv_string_array("t.sarr", {"a", "", "ccc"});
  {  // array of two arrays of int32
    vqtest::ByteSink s;
    s.put<uint32_t>(9);
    s.put<uint64_t>(2);
    for (int k = 0; k < 2; ++k) {
      s.put<uint32_t>(5);
      s.put<uint64_t>(2);
      s.put<int32_t>(k);
      s.put<int32_t>(10 + k);
    }
    w.kv_raw("t.nested", 9, s.b);
  }
  w.tensor_f32("f32", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  int k = 0;
  for (vq::GgmlType t : kQuantTypes) {
    const Quantized q = make_quantized(t, 2, 100 + k);
    const uint64_t n = q.expect.size();
    w.tensor(std::string("q.") + vq::ggml_type_name(q.type), q.type, {n / 2, 2}, q.bytes);
    ++k;
  }
  return w;
}

TEST(Gguf, ReadsMetadataOfEveryTypeAndTensors) {
  for (uint32_t version : {2u, 3u}) {
    GgufWriter w = full_writer();
    w.version = version;
    const Bytes b = w.build();
    const vq::GgufFile g = parse(b);
    EXPECT_EQ(g.version(), version);
    EXPECT_EQ(g.get("t.u8").as_int("t.u8"), 200);
    EXPECT_EQ(g.get("t.i8").as_int("t.i8"), -100);
    EXPECT_EQ(g.get("t.u16").as_int("t.u16"), 60000);
    EXPECT_EQ(g.get("t.i16").as_int("t.i16"), -30000);
    EXPECT_EQ(g.get("t.u32").as_int("t.u32"), 4000000000ll);
    EXPECT_EQ(g.get("t.i32").as_int("t.i32"), -2000000000);
    EXPECT_EQ(g.get("t.f32").as_float("t.f32"), 1.5);
    EXPECT_TRUE(g.get("t.bool").as_bool("t.bool"));
    EXPECT_EQ(g.architecture(), "llama");
    EXPECT_EQ(g.get("t.u64").as_int("t.u64"), 1ll << 40);
    EXPECT_EQ(g.get("t.i64").as_int("t.i64"), -(1ll << 40));
    EXPECT_EQ(g.get("t.f64").as_float("t.f64"), 0.25);
    EXPECT_EQ(g.get("t.farr").as_float_array("t.farr"), (std::vector<float>{1, 2, 3}));
    EXPECT_EQ(g.get("t.sarr").as_string_array("t.sarr"),
              (std::vector<std::string>{"a", "", "ccc"}));
    const vq::GgufValue& nested = g.get("t.nested");
    ASSERT_EQ(nested.arr.size(), 2u);
    EXPECT_EQ(nested.arr[1].as_int_array("x"), (std::vector<int64_t>{1, 11}));
    EXPECT_THROW(g.get("t.sarr").as_int("t.sarr"), vq::FormatError);
    EXPECT_THROW(g.get("missing.key"), vq::FormatError);
    ASSERT_EQ(g.tensors().size(), 1u + std::size(kQuantTypes));
    const vq::GgufTensorInfo& f = g.tensor("f32");
    EXPECT_EQ(f.dims, (std::vector<int64_t>{4, 2}));
    EXPECT_EQ(f.shape(), (std::vector<int64_t>{2, 4}));
    EXPECT_EQ(g.dequantize(f), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
    int k = 0;
    for (vq::GgmlType t : kQuantTypes) {
      const Quantized q = make_quantized(t, 2, 100 + k++);
      const vq::GgufTensorInfo& ti =
          g.tensor(std::string("q.") + vq::ggml_type_name(static_cast<uint32_t>(t)));
      EXPECT_EQ(ti.type, t);
      EXPECT_EQ((g.data_offset() + ti.offset) % g.alignment(), 0u);
      const std::vector<float> v = g.dequantize(ti);
      ASSERT_EQ(v.size(), q.expect.size());
      for (size_t i = 0; i < v.size(); ++i)
        ASSERT_NEAR(v[i], q.expect[i], 1e-6 * std::fabs(q.expect[i]) + 1e-9);
      // Row access: the second row alone.
      std::vector<float> row(static_cast<size_t>(ti.dims[0]));
      g.dequantize_rows(ti, 1, 1, row.data());
      for (size_t i = 0; i < row.size(); ++i) ASSERT_EQ(row[i], v[row.size() + i]);
      EXPECT_THROW(g.dequantize_rows(ti, 1, 2, row.data()), vq::InvalidArgument);
    }
  }
}

TEST(Gguf, CustomAlignmentIsHonoured) {
  GgufWriter w;
  w.alignment = 64;
  w.write_alignment_key = true;
  w.tensor_f32("a", {3}, {1, 2, 3});
  w.tensor_f32("b", {2}, {4, 5});
  const vq::GgufFile g = parse(w.build());
  EXPECT_EQ(g.alignment(), 64u);
  EXPECT_EQ(g.data_offset() % 64, 0u);
  EXPECT_EQ(g.tensor("b").offset, 64u);
  EXPECT_EQ(g.dequantize(g.tensor("b")), (std::vector<float>{4, 5}));
  GgufWriter bad;
  bad.alignment = 3;
  bad.write_alignment_key = true;
  EXPECT_NE(refusal(bad.build()).find("general.alignment = 3"), std::string::npos);
}

TEST(Gguf, EveryTruncationIsRefusedCleanly) {
  GgufWriter w = full_writer();
  const Bytes b = w.build();
  // Every section boundary named in the message's neighbourhood, and every other prefix too.
  for (size_t cut = 0; cut < b.size(); ++cut) {
    const Bytes p(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(cut));
    const std::string msg = refusal(p);
    ASSERT_NE(msg, "<accepted>") << "prefix of " << cut << " bytes accepted";
  }
  EXPECT_NE(refusal(Bytes(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(w.end_header)))
                .find("metadata count"),
            std::string::npos);
  EXPECT_NE(refusal(Bytes(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(w.end_kv)))
                .find("tensor #0 name"),
            std::string::npos);
  EXPECT_NE(refusal(Bytes(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(w.end_infos)))
                .find("past the end"),
            std::string::npos);
  EXPECT_NE(refusal(Bytes(b.begin(), b.end() - 1)).find("lie outside"), std::string::npos);
}

TEST(Gguf, HostileHeadersAreRefusedNamingTheField) {
  auto with = [](auto edit) {
    GgufWriter w;
    w.tensor_f32("w", {32, 2}, std::vector<float>(64, 1.0f));
    edit(w);
    return refusal(w.build());
  };
  Bytes notgguf = {'G', 'G', 'M', 'L', 0, 0, 0, 0};
  EXPECT_NE(refusal(notgguf).find("not a GGUF file"), std::string::npos);
  EXPECT_NE(with([](GgufWriter& w) { w.version = 1; }).find("GGUF version 1 is not supported"),
            std::string::npos);
  EXPECT_NE(with([](GgufWriter& w) { w.version = 0x03000000u; }).find("big-endian"),
            std::string::npos);
  // Unknown and known-but-unsupported tensor types are named, with the supported list.
  {
    GgufWriter w;
    w.tensor("w", 10, {256}, Bytes(84));
    const std::string m = refusal(w.build());
    EXPECT_NE(m.find("tensor w: tensor type Q2_K is not supported"), std::string::npos) << m;
    EXPECT_NE(m.find("Q6_K"), std::string::npos) << m;
  }
  {
    GgufWriter w;
    w.tensor("w", 77, {4}, Bytes(16));
    EXPECT_NE(refusal(w.build()).find("type#77"), std::string::npos);
  }
  // Offsets: misaligned, past the data, overlapping.
  {
    GgufWriter w;
    w.tensor_f32("a", {8}, std::vector<float>(8));
    w.tensor("b", 0, {8}, Bytes(32), 4);
    EXPECT_NE(refusal(w.build()).find("not a multiple of the alignment"), std::string::npos);
  }
  {
    GgufWriter w;
    w.tensor_f32("a", {8}, std::vector<float>(8));
    w.tensor("b", 0, {8}, Bytes(32), 0);  // same bytes as a
    EXPECT_NE(refusal(w.build()).find("overlap"), std::string::npos);
  }
  {
    GgufWriter w;
    w.tensor_f32("a", {8}, std::vector<float>(8));
    Bytes b = w.build();
    // Rewrite a's offset (the last 8 bytes of its info) to a huge aligned value.
    const uint64_t huge = 1ull << 60;
    std::memcpy(b.data() + w.end_infos - 8, &huge, 8);
    EXPECT_NE(refusal(b).find("tensor a: bytes ["), std::string::npos);
  }
  // Dimensions: rank 0/5, a zero dim, an overflowing product, a first dim not a whole block.
  {
    GgufWriter w;
    w.tensor("a", 0, {1, 1, 1, 1, 1}, Bytes(4));
    EXPECT_NE(refusal(w.build()).find("rank 5"), std::string::npos);
  }
  {
    GgufWriter w;
    w.tensor("a", 0, {0}, Bytes());
    EXPECT_NE(refusal(w.build()).find("dim 0 is 0"), std::string::npos);
  }
  {
    GgufWriter w;
    w.tensor("a", 0, {1ull << 32, 1ull << 32}, Bytes());
    EXPECT_NE(refusal(w.build()).find("dims overflow"), std::string::npos);
  }
  {
    GgufWriter w;
    w.tensor("a", 8, {16}, Bytes(34));
    EXPECT_NE(refusal(w.build()).find("not a multiple of the Q8_0 block size 32"),
              std::string::npos);
  }
  // Counts larger than the file, lengths larger than the file, bad value types, duplicates.
  {
    GgufWriter w;
    Bytes b = w.build();
    const uint64_t n = 1ull << 50;
    std::memcpy(b.data() + 8, &n, 8);
    EXPECT_NE(refusal(b).find("tensor count"), std::string::npos);
    std::memcpy(b.data() + 8, "\0\0\0\0\0\0\0\0", 8);
    std::memcpy(b.data() + 16, &n, 8);
    EXPECT_NE(refusal(b).find("metadata count"), std::string::npos);
  }
  {
    GgufWriter w;
    vqtest::ByteSink s;
    s.put<uint64_t>(1ull << 40);  // string length far past the end
    w.kv_raw("k", 8, s.b);
    EXPECT_NE(refusal(w.build()).find("metadata k needs"), std::string::npos);
  }
  {
    GgufWriter w;
    vqtest::ByteSink s;
    s.put<uint32_t>(8);
    s.put<uint64_t>(1ull << 40);  // array count far past the end
    w.kv_raw("arr", 9, s.b);
    EXPECT_NE(refusal(w.build()).find("metadata arr: array of 1099511627776 string"),
              std::string::npos);
  }
  {
    GgufWriter w;
    w.kv<uint32_t>("k", 13, 0);
    EXPECT_NE(refusal(w.build()).find("value type 13"), std::string::npos);
  }
  {
    GgufWriter w;
    w.kv<uint8_t>("k", 7, 2);
    EXPECT_NE(refusal(w.build()).find("bool byte is 2"), std::string::npos);
  }
  {
    GgufWriter w;
    w.kv_array<uint8_t>("b", 7, {1, 2});
    EXPECT_NE(refusal(w.build()).find("metadata b[1]: bool byte is 2"), std::string::npos);
  }
  {  // a numeric array is decoded from the file on access, element by element
    GgufWriter w;
    w.kv_array<int16_t>("h", 3, {-7, 9});
    const vq::GgufFile g = parse(w.build());
    EXPECT_EQ(g.get("h").count, 2u);
    EXPECT_EQ(g.get("h").element(0).as_int("h"), -7);
    EXPECT_EQ(g.get("h").as_float_array("h"), (std::vector<float>{-7, 9}));
    EXPECT_THROW(g.get("h").element(2), vq::InvalidArgument);
    EXPECT_THROW(g.get("h").as_string_array("h"), vq::FormatError);
  }
  {
    GgufWriter w;
    w.kv<uint8_t>("k", 0, 1);
    w.kv<uint8_t>("k", 0, 2);
    EXPECT_NE(refusal(w.build()).find("metadata key k appears twice"), std::string::npos);
  }
  {
    GgufWriter w;
    w.tensor_f32("a", {1}, {1});
    w.tensor_f32("a", {1}, {2});
    EXPECT_NE(refusal(w.build()).find("tensor a: the name appears twice"), std::string::npos);
  }
  {  // arrays nested 9 deep
    GgufWriter w;
    vqtest::ByteSink s;
    for (int d = 0; d < 9; ++d) {
      s.put<uint32_t>(9);
      s.put<uint64_t>(1);
    }
    s.put<uint32_t>(0);
    s.put<uint64_t>(0);
    w.kv_raw("deep", 9, s.b);
    EXPECT_NE(refusal(w.build()).find("nested deeper"), std::string::npos);
  }
}

TEST(Gguf, OpenNamesThePathAndMissingFiles) {
  EXPECT_THROW(vq::GgufFile::open("/nonexistent/x.gguf"), vq::IoError);
  const std::string p = (std::filesystem::temp_directory_path() / "vq_gguf_bad.gguf").string();
  {
    std::ofstream f(p, std::ios::binary);
    f << "GGUF";
  }
  try {
    vq::GgufFile::open(p);
    ADD_FAILURE() << "accepted";
  } catch (const vq::FormatError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(p, 0), 0u) << e.what();
  }
  std::filesystem::remove(p);
}

// stories260K.gguf (llama.cpp's converter) against stories260K.bin: every tensor must equal the
// llama2.c weights. The check tries both the stored layout and llama.cpp's q/k row permutation
// and reports which one holds, so the layout is measured, not assumed.
void check_gguf_against_bin(const std::string& gname, const std::string& bname) {
  const std::string gpath = vq::locate_model_file(gname);
  const std::string bpath = vq::locate_model_file(bname);
  if (gpath.empty() || bpath.empty())
    GTEST_SKIP() << gname << " / " << bname << " not found in ../shared/models";
  const vq::GgufFile g = vq::GgufFile::open(gpath);
  const vq::Model m = vq::Model::load(bpath);
  const vq::ModelConfig& c = m.config();
  EXPECT_EQ(g.architecture(), "llama");
  EXPECT_EQ(g.get_int("llama.context_length", 0), c.seq_len);
  EXPECT_EQ(g.get_int("llama.embedding_length", 0), c.dim);
  EXPECT_EQ(g.get_int("llama.block_count", 0), c.n_layers);
  EXPECT_EQ(g.get_int("llama.attention.head_count", 0), c.n_heads);
  EXPECT_EQ(g.get_int("llama.attention.head_count_kv", 0), c.n_kv_heads);
  EXPECT_EQ(g.get_int("llama.feed_forward_length", 0), c.hidden_dim);
  auto same = [](const std::vector<float>& a, const float* b, int64_t n) {
    if (static_cast<int64_t>(a.size()) != n) return false;
    return std::memcmp(a.data(), b, static_cast<size_t>(n) * 4) == 0;
  };
  // llama.cpp's permute for q/k: within each head, row (i * 2 + j) of the HF layout comes from
  // row (j * head_dim/2 + i), i.e. interleaving the two halves.
  auto permuted = [&](const float* w, int64_t rows, int64_t heads) {
    const int64_t hd = rows / heads, cols = c.dim;
    std::vector<float> out(static_cast<size_t>(rows * cols));
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t r = 0; r < hd; ++r) {
        const int64_t src = h * hd + (r % 2) * (hd / 2) + r / 2;
        std::memcpy(&out[(h * hd + r) * cols], w + src * cols, static_cast<size_t>(cols) * 4);
      }
    return out;
  };
  auto check = [&](const std::string& name, const float* w, int64_t rows, int64_t cols) {
    const vq::GgufTensorInfo& t = g.tensor(name);
    EXPECT_EQ(t.type, vq::GgmlType::F32) << name;
    const std::vector<int64_t> want =
        rows == 1 ? std::vector<int64_t>{cols} : std::vector<int64_t>{cols, rows};
    EXPECT_EQ(t.dims, want) << name;
    EXPECT_TRUE(same(g.dequantize(t), w, rows * cols)) << name << " differs from the .bin";
  };
  check("token_embd.weight", m.token_embedding(), c.vocab_size, c.dim);
  check("output_norm.weight", m.rms_final(), 1, c.dim);
  int direct_qk = 0, permuted_qk = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const vq::LayerWeights w = m.layer(l);
    const std::string p = "blk." + std::to_string(l) + ".";
    check(p + "attn_norm.weight", w.rms_att, 1, c.dim);
    check(p + "ffn_norm.weight", w.rms_ffn, 1, c.dim);
    check(p + "attn_v.weight", w.wv, c.kv_dim(), c.dim);
    check(p + "attn_output.weight", w.wo, c.dim, c.dim);
    check(p + "ffn_gate.weight", w.w1, c.hidden_dim, c.dim);
    check(p + "ffn_down.weight", w.w2, c.dim, c.hidden_dim);
    check(p + "ffn_up.weight", w.w3, c.hidden_dim, c.dim);
    for (auto [name, wt, rows, heads] :
         {std::tuple{"attn_q.weight", w.wq, c.dim, c.n_heads},
          std::tuple{"attn_k.weight", w.wk, c.kv_dim(), c.n_kv_heads}}) {
      const std::vector<float> gq = g.dequantize(g.tensor(p + name));
      if (same(gq, wt, rows * c.dim))
        ++direct_qk;
      else if (same(gq, permuted(wt, rows, heads).data(), rows * c.dim))
        ++permuted_qk;
      else
        ADD_FAILURE() << p << name << " matches neither the .bin rows nor their permutation";
    }
  }
  std::printf("[%s] q/k tensors equal to the .bin as stored: %d, after permutation: %d\n",
              gname.c_str(), direct_qk, permuted_qk);
  // What the file actually holds: llama.cpp's converter permutes the HF export back, so the GGUF
  // keeps llama2.c's adjacent-pair layout.
  EXPECT_EQ(direct_qk, 2 * c.n_layers);
  EXPECT_EQ(g.find_tensor("output.weight") == nullptr, c.shared_classifier);
}

TEST(Gguf, Stories260KMatchesTheLlama2cCheckpoint) {
  check_gguf_against_bin("stories260K.gguf", "stories260K.bin");
}
TEST(Gguf, BabyllamaCharMatchesTheLlama2cCheckpoint) {
  check_gguf_against_bin("babyllama-char.gguf", "babyllama-char.bin");
}

}  // namespace

namespace {

// The fuzz seeds are written by fuzz/make_format_seeds.py, a second, independent writer (Python,
// from the format descriptions): our reader must accept them and read back what it wrote.
TEST(Gguf, PythonWrittenSeedsParse) {
  const std::string dir = std::string(VQ_SOURCE_DIR) + "/fuzz/corpus/gguf/";
  const vq::GgufFile g = vq::GgufFile::open(dir + "tensors_v3");
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.architecture(), "llama");
  EXPECT_EQ(g.get_int("llama.context_length", 0), 64);
  EXPECT_EQ(g.get("t.arr").as_int_array("t.arr"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(g.get("t.i64").as_int("t.i64"), -3);
  const std::vector<float> w = g.dequantize(g.tensor("w"));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(w[i], 0.5f * i - 1);
  const std::vector<float> q = g.dequantize(g.tensor("q"));
  const float d = vq::fp16_to_fp32(vq::fp32_to_fp16(0.01f));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q[i], d * static_cast<float>(i));
  EXPECT_EQ(g.tensor("k4").type, vq::GgmlType::Q4_K);
  EXPECT_EQ(g.tensor("k6").type, vq::GgmlType::Q6_K);
  EXPECT_EQ(vq::GgufFile::open(dir + "tensors_v2").version(), 2u);
  const auto spm = vq::tokenizer_from_gguf(vq::GgufFile::open(dir + "vocab_llama"));
  EXPECT_EQ(spm->encode("ab", true), (std::vector<int32_t>{1, 7}));
  const auto bpe = vq::tokenizer_from_gguf(vq::GgufFile::open(dir + "vocab_gpt2"));
  EXPECT_EQ(bpe->encode("ab a", false), (std::vector<int32_t>{2, 4}));
  const vq::SafetensorsFile s = vq::SafetensorsFile::open(std::string(VQ_SOURCE_DIR) +
                                                          "/fuzz/corpus/safetensors/three_dtypes");
  EXPECT_EQ(s.to_float(*s.find_tensor("b")), (std::vector<float>{1, -2, 0.5f}));
  EXPECT_EQ(s.to_float(*s.find_tensor("c")), (std::vector<float>{1, -2}));
}

}  // namespace

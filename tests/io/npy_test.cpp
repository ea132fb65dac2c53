// .npy reader/writer: round trips for every dtype and version, and every refusal the reader
// promises (bad magic/version, unsupported dtype, big-endian, Fortran order, truncation, header
// lies, overflow, missing file).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "io/npy.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/npy.hpp"
#include "veloxquant/tensor.hpp"

namespace {

using vq::NpyArray;
using vq::NpyDtype;

// A .npy image built by hand: any version, any dict text, any payload.
std::vector<uint8_t> raw_npy(int major, const std::string& dict, const std::vector<uint8_t>& data,
                             int minor = 0) {
  std::vector<uint8_t> out = {
      0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), static_cast<uint8_t>(minor)};
  const size_t len = dict.size();
  const int len_bytes = major == 1 ? 2 : 4;
  for (int b = 0; b < len_bytes; ++b) out.push_back(static_cast<uint8_t>(len >> (8 * b)));
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<uint8_t> floats_le(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("vq_npy_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

template <typename Fn>
std::string format_error_of(Fn fn) {
  try {
    fn();
  } catch (const vq::FormatError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("WRONG EXCEPTION TYPE: ") + e.what();
  }
  return "NO EXCEPTION";
}

TEST(Npy, RoundTripFloat32AllRanks) {
  vq::Rng rng(7);
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
           {}, {5}, {3, 4}, {2, 3, 8}, {2, 2, 3, 8}, {2, 2, 2, 3, 4}, {0, 4}, {4, 0, 2}}) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = static_cast<float>(rng.normal());
    const NpyArray a = vq::npy_from_float(x.data(), shape, NpyDtype::Float32);
    const std::vector<uint8_t> img = vq::encode_npy(a);
    EXPECT_EQ(img.size() % 64, a.bytes.size() % 64) << "header not padded to 64 bytes";
    const NpyArray b = vq::parse_npy(img.data(), img.size());
    EXPECT_EQ(b.dtype, NpyDtype::Float32);
    EXPECT_EQ(b.shape, shape);
    EXPECT_EQ(b.to_float(), x);
  }
}

TEST(Npy, RoundTripFloat16AndBFloat16ThroughFiles) {
  vq::Rng rng(8);
  std::vector<float> x(2 * 3 * 16);
  for (auto& v : x) v = static_cast<float>(rng.normal() * 10);
  for (NpyDtype t : {NpyDtype::Float16, NpyDtype::BFloat16}) {
    const std::string path = temp_path(std::string("rt_") + vq::npy_dtype_name(t) + ".npy");
    vq::write_npy(path, vq::npy_from_float(x.data(), {2, 3, 16}, t));
    vq::NpyReadOptions opts;
    opts.u2_as_bfloat16 = t == NpyDtype::BFloat16;
    const NpyArray b = vq::read_npy(path, opts);
    std::filesystem::remove(path);
    ASSERT_EQ(b.dtype, t);
    ASSERT_EQ(b.shape, (std::vector<int64_t>{2, 3, 16}));
    const std::vector<float> y = b.to_float();
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = t == NpyDtype::Float16 ? vq::round_to_fp16(x[i])
                                                : vq::bf16_to_fp32(vq::fp32_to_bf16(x[i]));
      EXPECT_EQ(y[i], want) << "element " << i;
    }
  }
}

TEST(Npy, Int64RoundTripAndExactBytes) {
  const std::vector<int64_t> pos = {0, 1, 5, 9, -1, 1LL << 40};
  const NpyArray a = vq::npy_from_int64(pos.data(), {2, 3});
  const std::vector<uint8_t> img = vq::encode_npy(a);
  // Byte for byte what NumPy 1.24 writes for np.save(f, np.zeros((2, 3), np.int64)): a 118-byte
  // header length, the dict, spaces up to 127 bytes, then '\n'.
  ASSERT_EQ(img.size(), 128u + 48u);
  EXPECT_EQ(img[8] | (img[9] << 8), 118);
  const std::string header(img.begin() + 10, img.begin() + 128);
  const std::string dict = "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }";
  EXPECT_EQ(header, dict + std::string(117 - dict.size(), ' ') + "\n");
  const NpyArray b = vq::parse_npy(img.data(), img.size());
  EXPECT_EQ(b.to_int64(), pos);
  // One-dimensional shapes keep the trailing comma of a Python 1-tuple.
  const NpyArray c = vq::npy_from_int64(pos.data(), {6});
  const std::vector<uint8_t> img1 = vq::encode_npy(c);
  EXPECT_NE(std::string(img1.begin(), img1.end()).find("'shape': (6,)"), std::string::npos);
}

TEST(Npy, ReadsVersion2And3AndOddButValidHeaders) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n";
  for (int major : {1, 2, 3}) {
    const auto img = raw_npy(major, dict, floats_le(x));
    EXPECT_EQ(vq::parse_npy(img.data(), img.size()).to_float(), x) << "version " << major;
  }
  // Different key order, double quotes, no trailing comma, a Python 2 long suffix.
  const auto img = raw_npy(1, "{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \"<f4\"}",
                           floats_le(x));
  const NpyArray a = vq::parse_npy(img.data(), img.size());
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  // Float64 is narrowed to fp32 on read.
  std::vector<uint8_t> d(16);
  const double dv[2] = {0.5, -3.25};
  std::memcpy(d.data(), dv, 16);
  const auto img64 = raw_npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }\n", d);
  EXPECT_EQ(vq::parse_npy(img64.data(), img64.size()).to_float(),
            (std::vector<float>{0.5f, -3.25f}));
  // Fortran order is harmless when at most one dimension exceeds 1.
  const auto f1 =
      raw_npy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 6), }\n", floats_le(x));
  EXPECT_EQ(vq::parse_npy(f1.data(), f1.size()).to_float(), x);
}

TEST(Npy, RejectsUnsupportedDtypes) {
  for (const std::string descr : {"<i2", "|u1", "|b1", "<c8", "<U3", "|O", "<f16", "f4", "<u2"}) {
    const auto img =
        raw_npy(1, "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (0,), }\n", {});
    const std::string msg = format_error_of([&] { vq::parse_npy(img.data(), img.size()); });
    EXPECT_NE(msg.find(descr), std::string::npos) << descr << " -> " << msg;
  }
  const auto structured =
      raw_npy(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (0,), }\n", {});
  EXPECT_NE(format_error_of([&] {
              vq::parse_npy(structured.data(), structured.size());
            }).find("structured"),
            std::string::npos);
}

TEST(Npy, RejectsBigEndianAndFortranOrder) {
  const std::vector<float> x(6, 1.0f);
  const auto be =
      raw_npy(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }\n", floats_le(x));
  EXPECT_NE(format_error_of([&] { vq::parse_npy(be.data(), be.size()); }).find("big-endian"),
            std::string::npos);
  const auto fo =
      raw_npy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", floats_le(x));
  EXPECT_NE(format_error_of([&] { vq::parse_npy(fo.data(), fo.size()); }).find("Fortran"),
            std::string::npos);
}

TEST(Npy, RejectsHeaderLiesAndOverflow) {
  const std::vector<float> x(6, 1.0f);
  const auto parse = [](const std::vector<uint8_t>& img) {
    return format_error_of([&] { vq::parse_npy(img.data(), img.size()); });
  };
  // Shape promises more than the file holds.
  EXPECT_NE(parse(raw_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }\n",
                          floats_le(x)))
                .find("truncated"),
            std::string::npos);
  // Shape promises less than the file holds.
  EXPECT_NE(parse(raw_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }\n",
                          floats_le(x)))
                .find("follow the header"),
            std::string::npos);
  // Dimension products overflowing 64 bits must fail before any allocation.
  EXPECT_NE(parse(raw_npy(1,
                          "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, "
                          "4294967296, 16), }\n",
                          {}))
                .find("2^62"),
            std::string::npos);
  EXPECT_NE(parse(raw_npy(1,
                          "{'descr': '<f4', 'fortran_order': False, 'shape': "
                          "(99999999999999999999,), }\n",
                          {}))
                .find("64-bit"),
            std::string::npos);
  // A negative dimension is not an integer the grammar accepts.
  EXPECT_NE(parse(raw_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }\n", {}))
                .find("non-negative"),
            std::string::npos);
  // Header length larger than the file.
  auto img =
      raw_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", floats_le(x));
  img[8] = 0xFF;
  img[9] = 0x7F;
  EXPECT_NE(parse(img).find("truncated header"), std::string::npos);
  // Malformed dicts: missing key, extra key, duplicate key, junk after the dict, bad bool.
  for (const std::string dict :
       {"{'descr': '<f4', 'shape': (2, 3), }",
        "{'descr': '<f4', 'fortran_order': False, "
        "'shape': (2, 3), 'extra': 1}",
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} x",
        "{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)}", "{'descr': '<f4'", "not a dict",
        "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}"}) {
    EXPECT_NE(parse(raw_npy(1, dict, floats_le(x))).find("npy"), std::string::npos) << dict;
  }
}

TEST(Npy, RejectsBadMagicVersionAndEveryTruncation) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const NpyArray a = vq::npy_from_float(x.data(), {2, 3});
  const std::vector<uint8_t> img = vq::encode_npy(a);
  for (size_t cut = 0; cut < img.size(); ++cut) {
    const std::string msg = format_error_of([&] { vq::parse_npy(img.data(), cut); });
    EXPECT_EQ(msg.find("WRONG"), std::string::npos) << cut << ": " << msg;
    EXPECT_NE(msg, "NO EXCEPTION") << "a file cut at byte " << cut << " was accepted";
  }
  auto bad = img;
  bad[1] = 'X';
  EXPECT_NE(format_error_of([&] { vq::parse_npy(bad.data(), bad.size()); }).find("magic"),
            std::string::npos);
  bad = img;
  bad[6] = 4;
  EXPECT_NE(format_error_of([&] { vq::parse_npy(bad.data(), bad.size()); }).find("version"),
            std::string::npos);
}

TEST(Npy, FileErrors) {
  try {
    vq::read_npy("/nonexistent/dir/keys.npy");
    FAIL() << "no exception";
  } catch (const vq::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/keys.npy"), std::string::npos);
  }
  EXPECT_THROW(vq::write_npy("/nonexistent/dir/out.npy", vq::npy_from_int64(nullptr, {0})),
               vq::IoError);
  // Truncated on disk: the file reader must check sizes against the real file size.
  const std::vector<float> x(100, 2.0f);
  std::vector<uint8_t> img = vq::encode_npy(vq::npy_from_float(x.data(), {10, 10}));
  const std::string path = temp_path("trunc.npy");
  for (size_t cut : {size_t{5}, size_t{11}, size_t{64}, img.size() - 1}) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(img.data(), 1, cut, f);
    std::fclose(f);
    EXPECT_THROW(vq::read_npy(path), vq::FormatError) << cut;
  }
  std::filesystem::remove(path);
}

TEST(Npy, ConversionsRefuseWrongKinds) {
  const std::vector<int64_t> p = {1, 2};
  EXPECT_THROW(vq::npy_from_int64(p.data(), {2}).to_float(), vq::InvalidArgument);
  const float f[2] = {1, 2};
  EXPECT_THROW(vq::npy_from_float(f, {2}).to_int64(), vq::InvalidArgument);
  EXPECT_THROW(vq::npy_from_float(f, {2}, NpyDtype::Int64), vq::InvalidArgument);
  NpyArray bad = vq::npy_from_float(f, {2});
  bad.shape = {3};
  EXPECT_THROW(vq::encode_npy(bad), vq::InvalidArgument);
}

TEST(Npy, Version2HeadersAndHeaderLengthLimit) {
  // A header longer than 65535 bytes needs version 2 (32-bit length field).
  const std::vector<float> x = {1, 2};
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  dict.append(70000, ' ');
  dict += '\n';
  const auto img = raw_npy(2, dict, floats_le(x));
  EXPECT_EQ(vq::parse_npy(img.data(), img.size()).to_float(), x);
  // Beyond the reader's 1 MiB header limit: refused before the header is parsed.
  std::string huge = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  huge.append(vq::npy::kMaxHeaderBytes, ' ');
  const auto big = raw_npy(2, huge, floats_le(x));
  EXPECT_NE(format_error_of([&] { vq::parse_npy(big.data(), big.size()); }).find("limit"),
            std::string::npos);
}

TEST(Npy, EveryHeaderByteMutationIsParsedOrRefused) {
  // Any byte of the prefix and header set to any of a few values: the reader either returns an
  // array whose byte count matches its shape or throws FormatError (never crashes or over-reads).
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const std::vector<uint8_t> img = vq::encode_npy(vq::npy_from_float(x.data(), {2, 3}));
  size_t accepted = 0, refused = 0;
  for (size_t i = 0; i < 64; ++i) {
    for (uint8_t value : {uint8_t{0}, uint8_t{'1'}, uint8_t{'('}, uint8_t{'\''}, uint8_t{0xFF}}) {
      std::vector<uint8_t> f = img;
      f[i] = value;
      try {
        const NpyArray a = vq::parse_npy(f.data(), f.size());
        EXPECT_EQ(a.bytes.size(), static_cast<size_t>(a.numel()) * vq::npy_dtype_size(a.dtype));
        ++accepted;
      } catch (const vq::FormatError&) {
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, 100u);
  EXPECT_GT(accepted, 0u);  // e.g. a changed padding byte or an equivalent shape spelling
}

}  // namespace

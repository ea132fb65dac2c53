// .vqkv container: round trips for every transform method and every layout, determinism, and
// refusal of damaged files: truncation at every byte offset, bit flips in the header, the table
// and every section, and forged headers whose checksum was recomputed (so the field checks
// themselves are exercised, not only the checksum).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "coding/ggml_blocks.hpp"
#include "io/vqkv.hpp"
#include "test_util.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/vqkv.hpp"

namespace {

using vq::CacheConfig;

std::vector<float> random_values(size_t n, uint64_t seed) {
  vq::Rng rng(seed);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(rng.normal() * (1.0 + static_cast<double>(i % 8) * 0.5));
  return x;
}

std::vector<std::string> transform_methods() {
  std::vector<std::string> ids;
  for (const auto& m : vq::methods())
    if (m.family == vq::Family::Transform && m.make_codec)
      ids.push_back(m.id);  // with a storage form
  return ids;
}

double rel_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double se = 0, ss = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    se += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    ss += double(x[i]) * x[i];
  }
  return std::sqrt(se / ss);
}

// Overwrite a little-endian field and re-seal the header checksum.
void forge(std::vector<uint8_t>& f, size_t off, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) f[off + static_cast<size_t>(i)] = uint8_t(value >> (8 * i));
  uint32_t spec_len;
  std::memcpy(&spec_len, f.data() + vq::vqkv::kOffSpecLen, 4);
  uint64_t n;
  std::memcpy(&n, f.data() + vq::vqkv::kOffNSections, 8);
  const uint64_t end = vq::vqkv::checksum_offset(spec_len, n);
  ASSERT_LE(end + 8, f.size());
  const uint64_t sum = vq::vqkv::xxh64(f.data(), static_cast<size_t>(end));
  std::memcpy(f.data() + end, &sum, 8);
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

TEST(Vqkv, EveryTransformMethodRoundTripsEveryLayout) {
  const std::vector<std::string> ids = transform_methods();
  ASSERT_FALSE(ids.empty());
  const std::vector<std::vector<int64_t>> shapes = {
      {40, 16}, {3, 40, 16}, {2, 3, 40, 16}, {2, 2, 3, 40, 16}};
  for (const std::string& id : ids) {
    for (const auto& shape : shapes) {
      size_t n = 1;
      for (int64_t d : shape) n *= static_cast<size_t>(d);
      const std::vector<float> x = random_values(n, 11);
      const CacheConfig config = vqtest::spec_at_dim(id, shape.back());
      vq::VqkvStats st;
      const std::vector<uint8_t> file =
          vq::vqkv_compress(x.data(), shape, config, vq::NpyDtype::Float32, &st);
      EXPECT_EQ(st.file_bytes, static_cast<int64_t>(file.size()));
      EXPECT_EQ(st.fp16_bytes, static_cast<int64_t>(2 * n));
      EXPECT_EQ(st.breakdown.total(), st.section_bytes) << id;
      // The same input gives the same bytes.
      EXPECT_EQ(vq::vqkv_compress(x.data(), shape, config), file) << id;

      const vq::VqkvArray back = vq::vqkv_decompress(file.data(), file.size());
      EXPECT_EQ(back.shape, shape) << id;
      EXPECT_EQ(back.header.spec, vq::make_codec(config, shape.back())->config().to_string(true));
      ASSERT_EQ(back.values.size(), n);
      // Decoding the file equals decoding the codec's own blocks: the container adds no error.
      const auto codec = vq::make_codec(config, shape.back());
      const vq::VqkvHeader& h = back.header;
      const int64_t per = h.H * h.S * h.D;
      for (int64_t b = 0; b < h.L * h.n_kinds(); ++b) {
        const vq::EncodedBlock blk = codec->encode(x.data() + b * per, h.H, h.S);
        std::vector<float> y(static_cast<size_t>(per));
        codec->decode(blk, y.data());
        ASSERT_EQ(0, std::memcmp(y.data(), back.values.data() + b * per, y.size() * 4))
            << id << " block " << b;
      }
      // Lossy, but a reconstruction. svdq's fixed schedule drops 6 of 16 components and puts 4
      // at 1 bit (a 1-bit min/max code costs more than dropping on these i.i.d. channels).
      EXPECT_LT(rel_rmse(x, back.values), id == "svdq" ? 0.8 : 0.6) << id;
    }
  }
}

TEST(Vqkv, HighRateMethodsAreAccurate) {
  const std::vector<int64_t> shape = {2, 64, 32};
  const std::vector<float> x = random_values(2 * 64 * 32, 3);
  for (const auto& [spec, bound] : std::vector<std::pair<std::string, double>>{
           {"q8_0", 0.01}, {"q4_0", 0.15}, {"kvtc:bit_budget=256", 0.05}}) {
    const auto file = vq::vqkv_compress(x.data(), shape, CacheConfig::parse(spec));
    const auto back = vq::vqkv_decompress(file.data(), file.size());
    EXPECT_LT(rel_rmse(x, back.values), bound) << spec;
  }
}

TEST(Vqkv, SourceDtypeIsRecordedAndRestored) {
  const std::vector<float> x = random_values(4 * 8, 5);
  const vq::NpyArray a = vq::npy_from_float(x.data(), {4, 8}, vq::NpyDtype::Float16);
  const auto file = vq::vqkv_compress(a, "q8_0:block=8");
  const auto back = vq::vqkv_decompress(file.data(), file.size());
  EXPECT_EQ(back.header.source_dtype, vq::NpyDtype::Float16);
  EXPECT_EQ(back.to_npy().dtype, vq::NpyDtype::Float16);
  EXPECT_EQ(back.header.layout, vq::VqkvLayout::SD);
}

TEST(Vqkv, EmptySequenceRoundTrips) {
  const std::vector<float> none;
  for (const std::string& id : transform_methods()) {
    const auto file = vq::vqkv_compress(none.data(), {2, 0, 8}, vqtest::spec_at_dim(id, 8));
    const auto back = vq::vqkv_decompress(file.data(), file.size());
    EXPECT_EQ(back.shape, (std::vector<int64_t>{2, 0, 8})) << id;
    EXPECT_TRUE(back.values.empty());
  }
}

TEST(Vqkv, RejectsBadInputs) {
  const std::vector<float> x = random_values(64, 1);
  const auto bad = [&](std::vector<int64_t> shape, const std::string& spec) {
    EXPECT_THROW(vq::vqkv_compress(x.data(), shape, CacheConfig::parse(spec)), vq::InvalidArgument)
        << spec;
  };
  bad({64}, "kvtc");                // rank 1
  bad({2, 3, 2, 2, 2, 2}, "kvtc");  // rank 6
  bad({2, 3, 1, 2, 4}, "kvtc");     // rank 5 without the K/V axis of 2
  bad({8, 8}, "h2o:budget=4");      // eviction method: no codec
  bad({0, 8, 8}, "kvtc");           // H = 0
  std::vector<float> nan = x;
  nan[5] = std::nanf("");
  EXPECT_THROW(vq::vqkv_compress(nan.data(), {8, 8}, CacheConfig::parse("q8_0")),
               vq::InvalidArgument);
}

// A small file used by the damage tests: 2 layers x K/V x 2 heads of kvtc.
std::vector<uint8_t> small_file(const std::string& spec = "kvtc:bit_budget=24") {
  const std::vector<float> x = random_values(2 * 2 * 2 * 12 * 8, 9);
  return vq::vqkv_compress(x.data(), {2, 2, 2, 12, 8}, CacheConfig::parse(spec));
}

TEST(Vqkv, TruncationAtEveryByteIsRefused) {
  for (const std::string spec : {"kvtc:bit_budget=24", "q4_0:block=8"}) {
    const std::vector<uint8_t> file = small_file(spec);
    ASSERT_NO_THROW(vq::vqkv_parse(file.data(), file.size()));
    for (size_t cut = 0; cut < file.size(); ++cut) {
      const std::vector<uint8_t> part(file.begin(), file.begin() + static_cast<long>(cut));
      const std::string msg =
          format_error_of([&] { vq::vqkv_decompress(part.data(), part.size()); });
      ASSERT_EQ(msg.find("WRONG"), std::string::npos) << spec << " cut " << cut << ": " << msg;
      ASSERT_NE(msg, "NO EXCEPTION") << spec << ": a file cut at byte " << cut << " was accepted";
    }
    // Extra bytes at the end are refused too.
    std::vector<uint8_t> longer = file;
    longer.push_back(0);
    EXPECT_NE(format_error_of([&] {
                vq::vqkv_parse(longer.data(), longer.size());
              }).find("unexpected bytes"),
              std::string::npos);
  }
}

TEST(Vqkv, BitFlipsInHeaderTableAndEverySectionAreRefused) {
  const std::vector<uint8_t> file = small_file();
  const vq::VqkvIndex idx = vq::vqkv_parse(file.data(), file.size());
  ASSERT_EQ(idx.sections.size(), 8u);
  // Every bit of the header and table.
  for (size_t byte = 0; byte < idx.header_bytes; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> f = file;
      f[byte] ^= uint8_t(1u << bit);
      const std::string msg = format_error_of([&] { vq::vqkv_decompress(f.data(), f.size()); });
      ASSERT_EQ(msg.find("WRONG"), std::string::npos) << byte << "." << bit << ": " << msg;
      ASSERT_NE(msg, "NO EXCEPTION") << "flip at header byte " << byte << " bit " << bit;
    }
  }
  // Every byte of every section, one bit each (cycling through bit positions).
  for (size_t i = 0; i < idx.sections.size(); ++i) {
    const vq::VqkvSection& s = idx.sections[i];
    ASSERT_GT(s.size, 0u);
    for (uint64_t j = 0; j < s.size; ++j) {
      std::vector<uint8_t> f = file;
      f[s.offset + j] ^= uint8_t(1u << (j % 8));
      const std::string msg = format_error_of([&] { vq::vqkv_decompress(f.data(), f.size()); });
      ASSERT_NE(msg.find("checksum mismatch"), std::string::npos)
          << "section " << i << " byte " << j << ": " << msg;
    }
  }
}

TEST(Vqkv, DamagedSectionsWithoutChecksumsNeverCrash) {
  // With section checksums off, the codecs' own decoders face the damage: they must either
  // decode something or throw FormatError, never crash or read out of bounds (run under ASan).
  vq::VqkvReadOptions no_sums;
  no_sums.verify_sections = false;
  for (const std::string spec :
       {"kvtc:bit_budget=24", "uniform:bit_budget=24", "q8_0:block=8", "q4_0:block=8"}) {
    const std::vector<uint8_t> file = small_file(spec);
    const vq::VqkvIndex idx = vq::vqkv_parse(file.data(), file.size());
    const vq::VqkvSection& s = idx.sections.front();
    for (uint64_t j = 0; j < s.size; ++j) {
      for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
        std::vector<uint8_t> f = file;
        f[s.offset + j] ^= mask;
        try {
          vq::vqkv_decompress(f.data(), f.size(), no_sums);
        } catch (const vq::FormatError&) {
        }
      }
    }
  }
}

TEST(Vqkv, ForgedHeadersAreRefusedByFieldChecks) {
  const std::vector<uint8_t> file = small_file();
  namespace k = vq::vqkv;
  const auto refused = [&](size_t off, uint64_t value, int bytes, const std::string& needle) {
    std::vector<uint8_t> f = file;
    forge(f, off, value, bytes);
    const std::string msg = format_error_of([&] { vq::vqkv_decompress(f.data(), f.size()); });
    EXPECT_NE(msg, "NO EXCEPTION") << "offset " << off << " value " << value;
    EXPECT_EQ(msg.find("WRONG"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos)
        << "offset " << off << " value " << value << ": " << msg;
  };
  refused(k::kOffFlags, 1, 2, "reserved");
  refused(k::kOffReserved, 7, 2, "reserved");
  refused(k::kOffLayout, 0, 1, "unknown layout");
  refused(k::kOffLayout, 5, 1, "unknown layout");
  refused(k::kOffLayout, 2, 1, "L = 2");  // [H, S, D] claims two layers
  refused(k::kOffDtype, 4, 1, "unknown source dtype");
  refused(k::kOffL, 0, 4, "field L");
  refused(k::kOffH, 0, 4, "field H");
  refused(k::kOffH, 3, 4, "sections in the table");
  refused(k::kOffD, 70000, 4, "field D");
  refused(k::kOffS, uint64_t{1} << 41, 8, "field S");
  refused(k::kOffS, uint64_t{1} << 38, 8, "reader's limit");  // a huge allocation is refused
  refused(k::kOffS, 13, 8, "vqkv: layer 0 K");  // S lie: the codec notices missing tokens
  // The spec: an unknown method, and an eviction method.
  {
    std::vector<uint8_t> f = file;
    const size_t spec_at = k::kFixedHeaderBytes;
    std::memcpy(f.data() + spec_at, "zzzz", 4);
    forge(f, 0, f[0], 1);
    EXPECT_NE(format_error_of([&] { vq::vqkv_parse(f.data(), f.size()); }).find("not usable"),
              std::string::npos);
  }
  // Table entries: wrong order, wrong kind, size lies, reserved bytes.
  const size_t table =
      k::kFixedHeaderBytes + vq::vqkv_parse(file.data(), file.size()).header.spec.size();
  refused(table + 8, 1, 4, "canonical order");  // entry 0 claims head 1
  refused(table + 4, 2, 1, "canonical order");  // entry 0 claims values
  refused(table + 5, 1, 1, "reserved");
  refused(table + 16, 1u << 30, 8, "runs past the end");
  refused(table + 16, 1, 8, "unexpected bytes");  // a shorter section leaves bytes over
  {
    // A section count that cannot fit: refused before the checksum is even located.
    std::vector<uint8_t> f = file;
    const uint64_t huge = uint64_t{1} << 40;
    std::memcpy(f.data() + k::kOffNSections, &huge, 8);
    EXPECT_NE(format_error_of([&] { vq::vqkv_parse(f.data(), f.size()); }).find("does not fit"),
              std::string::npos);
  }
}

TEST(Vqkv, RefusesForeignFilesAndVersions) {
  std::vector<uint8_t> file = small_file();
  std::vector<uint8_t> f = file;
  f[1] = 'X';
  EXPECT_NE(format_error_of([&] { vq::vqkv_parse(f.data(), f.size()); }).find("magic"),
            std::string::npos);
  f = file;
  f[vq::vqkv::kOffVersion] = 3;
  EXPECT_NE(format_error_of([&] { vq::vqkv_parse(f.data(), f.size()); }).find("version 3"),
            std::string::npos);
  f[vq::vqkv::kOffVersion] = 0;
  EXPECT_NE(format_error_of([&] { vq::vqkv_parse(f.data(), f.size()); }).find("version 0"),
            std::string::npos);
  const std::vector<uint8_t> npy = vq::encode_npy(vq::npy_from_int64(nullptr, {0}));
  EXPECT_THROW(vq::vqkv_parse(npy.data(), npy.size()), vq::FormatError);
  EXPECT_THROW(vq::read_file_bytes("/nonexistent/x.vqkv"), vq::IoError);
}

// Version 1 stored q8_0 / q4_0 with blocks along each token's row of all heads. Two files the
// version-1 writer produced (fuzz/corpus/vqkv/*_v1, from fuzz/make_corpus.cpp's seeds 36 and 37)
// still decode, to exactly what that layout gives: each token's H * D values quantized as one
// ggml row. Version 2 writes blocks inside each head.
TEST(Vqkv, ReadsVersion1GgmlFilesWithBlocksAcrossHeads) {
  struct Case {
    const char* file;
    vq::coding::GgmlType type;
    int64_t H, S, D;
    uint64_t seed;
  };
  const Case cases[] = {{"q8_0_hsd_v1", vq::coding::GgmlType::Q8_0, 2, 6, 8, 36},
                        {"q4_0_sd_v1", vq::coding::GgmlType::Q4_0, 1, 5, 16, 37}};
  for (const Case& c : cases) {
    const std::string path = std::string(VQ_SOURCE_DIR) + "/fuzz/corpus/vqkv/" + c.file;
    const std::vector<uint8_t> file = vq::read_file_bytes(path);
    const vq::VqkvArray got = vq::vqkv_decompress(file.data(), file.size());
    EXPECT_EQ(got.header.version, 1) << c.file;
    vq::Rng rng(c.seed);
    std::vector<float> x(static_cast<size_t>(c.H * c.S * c.D));
    for (float& v : x) v = static_cast<float>(rng.normal());
    const int64_t W = c.H * c.D;
    std::vector<float> row(static_cast<size_t>(W)), back(static_cast<size_t>(W));
    std::vector<uint8_t> codes(static_cast<size_t>(vq::coding::ggml_row_bytes(c.type, W)));
    ASSERT_EQ(got.values.size(), x.size());
    for (int64_t s = 0; s < c.S; ++s) {
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t d = 0; d < c.D; ++d)
          row[static_cast<size_t>(h * c.D + d)] = x[static_cast<size_t>((h * c.S + s) * c.D + d)];
      vq::coding::ggml_quantize_row(c.type, row.data(), W, codes.data());
      vq::coding::ggml_dequantize_row(c.type, codes.data(), W, back.data());
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t d = 0; d < c.D; ++d)
          ASSERT_EQ(got.values[static_cast<size_t>((h * c.S + s) * c.D + d)],
                    back[static_cast<size_t>(h * c.D + d)])
              << c.file << " token " << s << " head " << h << " value " << d;
    }
  }
}

// Version 2 keeps q8_0's blocks inside each head, as the cache does: a file's values equal the
// cache codec's per-head rows, one section per head.
TEST(Vqkv, GgmlBlocksLieInsideEachHead) {
  const int64_t H = 3, S = 7, D = 32;
  const std::vector<float> x = random_values(static_cast<size_t>(H * S * D), 5);
  for (const char* spec : {"q8_0", "q4_0", "q8_0:block=8"}) {
    const CacheConfig cfg = CacheConfig::parse(spec);
    const std::vector<uint8_t> file = vq::vqkv_compress(x.data(), {H, S, D}, cfg);
    const vq::VqkvIndex idx = vq::vqkv_parse(file.data(), file.size());
    ASSERT_EQ(idx.sections.size(), static_cast<size_t>(H)) << spec;
    const vq::VqkvArray got = vq::vqkv_decompress(file.data(), file.size());
    const auto t = cfg.method() == "q8_0" ? vq::coding::GgmlType::Q8_0 : vq::coding::GgmlType::Q4_0;
    const int64_t block = std::stoll(cfg.get_string("block"));
    std::vector<uint8_t> codes(
        static_cast<size_t>(D / block * vq::coding::ggml_block_bytes(t, block)));
    std::vector<float> back(static_cast<size_t>(D));
    for (int64_t r = 0; r < H * S; ++r) {
      vq::coding::ggml_quantize_blocks(t, block, x.data() + r * D, D, codes.data());
      vq::coding::ggml_dequantize_blocks(t, block, codes.data(), D, back.data());
      for (int64_t d = 0; d < D; ++d)
        ASSERT_EQ(got.values[static_cast<size_t>(r * D + d)], back[static_cast<size_t>(d)])
            << spec << " row " << r << " value " << d;
    }
  }
  // A head_dim that blocks of 32 cannot tile is refused as the cache refuses it.
  const std::vector<float> y = random_values(2 * 4 * 16, 6);
  EXPECT_THROW(vq::vqkv_compress(y.data(), {2, 4, 16}, CacheConfig::parse("q8_0")),
               vq::InvalidArgument);
}

}  // namespace

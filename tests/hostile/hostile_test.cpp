// Hostile inputs: each must be refused with the documented exception type and a message that names
// the offending value. The inputs are generated here, deterministically, from valid files built by
// the library itself (fixed seeds), then damaged: truncated, bit-flipped, checksums broken, sizes
// that overflow, headers that lie about shapes (re-sealed with a valid header checksum so that the
// lie, not the checksum, is what the reader must catch), NaN/Inf given to every registered method,
// zero-size dimensions, mismatched K/V/Q shapes, budgets and bit budgets out of range.
// The catalogue is listed in docs/reliability.md.
#include <gtest/gtest.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/codec.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/npy.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/tensor.hpp"
#include "veloxquant/vqkv.hpp"

namespace {

using Bytes = std::vector<uint8_t>;

/// Run fn; require it to throw exactly an Ex (or subclass) whose message contains every needle.
template <typename Ex>
void expect_refused(const std::string& what, const std::function<void()>& fn,
                    const std::vector<std::string>& needles) {
  SCOPED_TRACE(what);
  try {
    fn();
  } catch (const Ex& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles) {
      EXPECT_NE(msg.find(n), std::string::npos)
          << "message '" << msg << "' does not name '" << n << "'";
    }
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type; message: " << e.what();
    return;
  }
  ADD_FAILURE() << "accepted instead of refused";
}

// ---- .vqkv helpers ------------------------------------------------------------------------------

template <typename T>
T get_le(const Bytes& b, size_t off) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(b[off + i]) << (8 * i));
  return v;
}
template <typename T>
void put_le(Bytes& b, size_t off, T v) {
  for (size_t i = 0; i < sizeof(T); ++i)
    b[off + i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
}

// Layout offsets from docs/format.md.
constexpr size_t kSpecLen = 12, kLayout = 16, kL = 20, kH = 24, kD = 28, kS = 32, kN = 40,
                 kSpec = 48;
size_t table_at(const Bytes& f) {
  return kSpec + get_le<uint32_t>(f, kSpecLen);
}
size_t payload_at(const Bytes& f) {
  return table_at(f) + 32 * get_le<uint64_t>(f, kN) + 8;
}
/// Recompute the header checksum so that a deliberately wrong field passes the checksum check.
void reseal(Bytes& f) {
  const size_t p = payload_at(f);
  put_le<uint64_t>(f, p - 8, XXH64(f.data(), p - 8, 0));
}
void decode_all(const Bytes& f) {
  (void)vq::vqkv_decompress(f.data(), f.size());
}

/// A valid kvtc file: layout HSD, H = 2 heads, S = 40 tokens, D = 8.
Bytes valid_vqkv(const std::string& spec = "kvtc:bit_budget=24") {
  const vq::Tensor x = vqtest::random_tensor(1, 2, 40, 8, 81);
  const vq::CacheConfig cfg = vq::CacheConfig::parse(spec);
  return vq::vqkv_compress(x.data(), {2, 40, 8}, cfg);
}

std::string tmp_file(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("vq_hostile_" + tag + "_" + std::to_string(static_cast<long>(::getpid())) + ".bin"))
      .string();
}

}  // namespace

TEST(Hostile, VqkvValidFileDecodes) {
  const Bytes f = valid_vqkv();
  const vq::VqkvArray a = vq::vqkv_decompress(f.data(), f.size());
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 40, 8}));
}

TEST(Hostile, VqkvTruncatedAnywhere) {
  const Bytes f = valid_vqkv();
  const size_t P = payload_at(f);
  for (size_t cut : {size_t{0}, size_t{7}, size_t{47}, size_t{55}, kSpec + 3, P - 9, P - 1, P,
                     P + 1, (P + f.size()) / 2, f.size() - 1}) {
    Bytes t(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(cut));
    expect_refused<vq::FormatError>("truncated to " + std::to_string(cut) + " bytes",
                                    [&] { decode_all(t); }, {std::to_string(cut)});
  }
}

TEST(Hostile, VqkvTrailingBytes) {
  Bytes f = valid_vqkv();
  const size_t n = f.size();
  f.push_back(0);
  expect_refused<vq::FormatError>("one extra byte", [&] { decode_all(f); },
                                  {std::to_string(n + 1)});
}

TEST(Hostile, VqkvBitFlipsEverywhereAreCaught) {
  const Bytes f = valid_vqkv();
  // Every 7th byte of the file, one bit each (the bit index cycles): header bytes break the header
  // checksum, section bytes break that section's checksum.
  int flips = 0;
  for (size_t i = 0; i < f.size(); i += 7) {
    Bytes g = f;
    g[i] ^= static_cast<uint8_t>(1u << (i % 8));
    expect_refused<vq::FormatError>("bit flip at byte " + std::to_string(i), [&] { decode_all(g); },
                                    {});
    ++flips;
  }
  EXPECT_GT(flips, 20);
}

TEST(Hostile, VqkvSectionChecksumMismatchNamed) {
  Bytes f = valid_vqkv();
  const size_t P = payload_at(f);
  f[P + 5] ^= 0x10;  // inside section 0
  expect_refused<vq::FormatError>("section byte flipped", [&] { decode_all(f); }, {"checksum"});
  // The stored checksum itself wrong (header re-sealed so only the section check can catch it).
  Bytes g = valid_vqkv();
  const size_t entry1 = table_at(g) + 32;  // section 1
  put_le<uint64_t>(g, entry1 + 24, get_le<uint64_t>(g, entry1 + 24) ^ 1);
  reseal(g);
  expect_refused<vq::FormatError>("stored section checksum wrong", [&] { decode_all(g); },
                                  {"checksum"});
}

TEST(Hostile, VqkvHeaderChecksumMismatch) {
  Bytes f = valid_vqkv();
  const size_t P = payload_at(f);
  f[P - 1] ^= 0x80;
  expect_refused<vq::FormatError>("header checksum byte", [&] { decode_all(f); }, {"checksum"});
}

TEST(Hostile, VqkvSizesThatOverflow) {
  {
    Bytes f = valid_vqkv();
    put_le<uint32_t>(f, kSpecLen, 0xFFFFFFFFu);
    expect_refused<vq::FormatError>("spec_len 2^32-1", [&] { decode_all(f); }, {"4294967295"});
  }
  {
    Bytes f = valid_vqkv();
    put_le<uint64_t>(f, kN, ~uint64_t{0});
    expect_refused<vq::FormatError>("N = 2^64-1", [&] { decode_all(f); }, {"18446744073709551615"});
  }
  {
    Bytes f = valid_vqkv();
    put_le<uint64_t>(f, table_at(f) + 16, ~uint64_t{0});  // section 0 size
    reseal(f);
    expect_refused<vq::FormatError>("section size 2^64-1", [&] { decode_all(f); },
                                    {"18446744073709551615"});
  }
  {
    Bytes f = valid_vqkv();
    put_le<uint64_t>(f, kS, uint64_t{1} << 62);
    reseal(f);
    expect_refused<vq::FormatError>("S = 2^62", [&] { decode_all(f); },
                                    {std::to_string(uint64_t{1} << 62)});
  }
  {
    // In range field by field, but L*H*S*D beyond the reader's value limit.
    Bytes f = valid_vqkv();
    put_le<uint32_t>(f, kH, 1u << 20);
    put_le<uint64_t>(f, kS, uint64_t{1} << 30);
    reseal(f);
    expect_refused<vq::FormatError>("numel 2^53", [&] { decode_all(f); }, {});
  }
}

TEST(Hostile, VqkvHeadersThatLieAboutShapes) {
  const Bytes base = valid_vqkv();
  const uint64_t S = get_le<uint64_t>(base, kS);
  {
    Bytes f = base;
    put_le<uint64_t>(f, kS, S + 1);
    reseal(f);
    expect_refused<vq::FormatError>("S one larger than coded", [&] { decode_all(f); }, {});
  }
  {
    Bytes f = base;
    put_le<uint64_t>(f, kS, S - 1);
    reseal(f);
    expect_refused<vq::FormatError>("S one smaller than coded", [&] { decode_all(f); }, {});
  }
  {
    Bytes f = base;
    put_le<uint32_t>(f, kD, 16);
    reseal(f);
    expect_refused<vq::FormatError>("D = 16 for D = 8 data", [&] { decode_all(f); }, {});
  }
  {
    Bytes f = base;
    put_le<uint32_t>(f, kH, 3);
    reseal(f);
    expect_refused<vq::FormatError>("H = 3 with 2 sections", [&] { decode_all(f); }, {"3"});
  }
  {
    Bytes f = base;
    put_le<uint32_t>(f, kL, 2);  // L > 1 is only allowed for layouts 3 and 4
    reseal(f);
    expect_refused<vq::FormatError>("L = 2 with layout HSD", [&] { decode_all(f); }, {"2"});
  }
  {
    Bytes f = base;
    f[kLayout] = 9;
    reseal(f);
    expect_refused<vq::FormatError>("layout 9", [&] { decode_all(f); }, {"9"});
  }
  {
    Bytes f = base;
    put_le<uint32_t>(f, kD, 0);
    reseal(f);
    expect_refused<vq::FormatError>("D = 0", [&] { decode_all(f); }, {"0"});
  }
  {
    // Section 1 claims head 0 again.
    Bytes f = base;
    put_le<uint32_t>(f, table_at(f) + 32 + 8, 0);
    reseal(f);
    expect_refused<vq::FormatError>("duplicate head", [&] { decode_all(f); }, {});
  }
  {
    // A version-2 q8_0 file (a section per head) relabelled version 1, whose q8_0 layout had
    // one section for all heads: the table does not match what that version writes.
    Bytes f = valid_vqkv("q8_0:block=8");
    put_le<uint16_t>(f, 8, 1);
    reseal(f);
    expect_refused<vq::FormatError>("q8_0 per-head sections under version 1",
                                    [&] { decode_all(f); }, {"sections"});
  }
  {
    // A spec naming an eviction method (no codec).
    Bytes f = base;
    const uint32_t len = get_le<uint32_t>(f, kSpecLen);
    std::string spec = "h2o";
    spec.resize(len, ' ');
    std::memcpy(f.data() + kSpec, spec.data(), len);
    reseal(f);
    expect_refused<vq::FormatError>("spec names h2o", [&] { decode_all(f); }, {"h2o"});
  }
}

TEST(Hostile, VqkvVersionAndReservedFields) {
  {
    Bytes f = valid_vqkv();
    put_le<uint16_t>(f, 8, 3);
    reseal(f);
    expect_refused<vq::FormatError>("version 3", [&] { decode_all(f); }, {"version 3"});
  }
  {
    Bytes f = valid_vqkv();
    put_le<uint16_t>(f, 8, 0);
    reseal(f);
    expect_refused<vq::FormatError>("version 0", [&] { decode_all(f); }, {"version 0"});
  }
  {
    Bytes f = valid_vqkv();
    put_le<uint16_t>(f, 10, 1);
    reseal(f);
    expect_refused<vq::FormatError>("flags 1", [&] { decode_all(f); }, {});
  }
  {
    Bytes f = valid_vqkv();
    f[0] = 'X';
    expect_refused<vq::FormatError>("bad magic", [&] { decode_all(f); }, {"magic"});
  }
}

// ---- .npy ---------------------------------------------------------------------------------------

namespace {
Bytes npy_with_header(const std::string& dict, size_t data_bytes) {
  std::string h = dict;
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  Bytes f = {0x93,
             'N',
             'U',
             'M',
             'P',
             'Y',
             1,
             0,
             static_cast<uint8_t>(h.size() & 0xFF),
             static_cast<uint8_t>(h.size() >> 8)};
  f.insert(f.end(), h.begin(), h.end());
  f.resize(f.size() + data_bytes, 0);
  return f;
}
void parse(const Bytes& f) {
  (void)vq::parse_npy(f.data(), f.size());
}
}  // namespace

TEST(Hostile, NpyRefusals) {
  expect_refused<vq::FormatError>("shape overflows int64",
                                  [&] {
                                    parse(npy_with_header(
                                        "{'descr': '<f4', 'fortran_order': False, 'shape': "
                                        "(4294967296, 4294967296, 4294967296), }",
                                        16));
                                  },
                                  {"4294967296"});
  expect_refused<vq::FormatError>(
      "shape lies (8 floats claimed, 4 present)",
      [&] {
        parse(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }", 16));
      },
      {"32"});
  expect_refused<vq::FormatError>(
      "big-endian",
      [&] {
        parse(npy_with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", 16));
      },
      {">f4"});
  expect_refused<vq::FormatError>(
      "fortran order",
      [&] {
        parse(npy_with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16));
      },
      {"ortran"});
  expect_refused<vq::FormatError>(
      "negative dimension",
      [&] {
        parse(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 4), }", 16));
      },
      {"-1"});
  expect_refused<vq::FormatError>(
      "unsupported dtype",
      [&] {
        parse(npy_with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16));
      },
      {"<c8"});
  expect_refused<vq::FormatError>("header is not a dict",
                                  [&] { parse(npy_with_header("[1, 2, 3]", 0)); }, {});
  Bytes good = npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 16);
  good.resize(good.size() - 1);
  expect_refused<vq::FormatError>("truncated data", [&] { parse(good); }, {"15"});
  Bytes magic = good;
  magic[1] = 'X';
  expect_refused<vq::FormatError>("bad magic", [&] { parse(magic); }, {});
}

// ---- checkpoint and tokenizer -------------------------------------------------------------------

namespace {
vq::ModelConfig tiny_config() {
  vq::ModelConfig c;
  c.dim = 16;
  c.hidden_dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 32;
  c.seq_len = 64;
  return c;
}
Bytes tiny_checkpoint() {
  const std::string p = tmp_file("ckpt_src");
  vq::Model::random(tiny_config(), 5).save(p);
  Bytes b = vq::read_file_bytes(p);
  std::filesystem::remove(p);
  return b;
}
void load_model(const Bytes& b) {
  const std::string p = tmp_file("ckpt");
  vq::write_file_bytes(p, b);
  struct Rm {
    std::string p;
    ~Rm() { std::filesystem::remove(p); }
  } rm{p};
  (void)vq::Model::load(p);
}
}  // namespace

TEST(Hostile, CheckpointRefusals) {
  const Bytes good = tiny_checkpoint();
  EXPECT_NO_THROW(load_model(good));
  {
    Bytes b(good.begin(), good.end() - 4);
    expect_refused<vq::FormatError>("truncated by one float", [&] { load_model(b); }, {});
  }
  {
    Bytes b(good.begin(), good.begin() + 20);
    expect_refused<vq::FormatError>("header cut", [&] { load_model(b); }, {"20"});
  }
  {
    Bytes b = good;
    b.resize(b.size() + 4, 0);
    expect_refused<vq::FormatError>("padded by one float", [&] { load_model(b); }, {});
  }
  {
    Bytes b = good;
    put_le<uint32_t>(b, 12, 0);  // n_heads = 0
    expect_refused<vq::FormatError>("n_heads = 0", [&] { load_model(b); }, {"n_heads"});
  }
  {
    Bytes b = good;
    put_le<int32_t>(b, 0, -16);  // dim < 0
    expect_refused<vq::FormatError>("dim = -16", [&] { load_model(b); }, {"-16"});
  }
  {
    Bytes b = good;
    put_le<int32_t>(b, 4, 0x7FFFFFFF);  // hidden_dim: sizes overflow a small file
    expect_refused<vq::FormatError>("hidden_dim = 2^31-1", [&] { load_model(b); }, {"2147483647"});
  }
  {
    Bytes b = good;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(b.data() + 28 + 4 * 100, &nan, 4);  // inside the token embedding table
    expect_refused<vq::FormatError>("NaN weight", [&] { load_model(b); }, {});
  }
}

namespace {
void load_tokenizer(const Bytes& b, int64_t vocab = 0) {
  const std::string p = tmp_file("tok");
  vq::write_file_bytes(p, b);
  struct Rm {
    std::string p;
    ~Rm() { std::filesystem::remove(p); }
  } rm{p};
  (void)vq::Tokenizer::load(p, vocab);
}
Bytes tiny_tokenizer() {
  Bytes b(4, 0);
  put_le<int32_t>(b, 0, 8);
  for (const std::string piece : {"<unk>", "<s>", "</s>", "a", "b", "ab"}) {
    const size_t o = b.size();
    b.resize(o + 8 + piece.size());
    const float score = -1.0f;
    std::memcpy(b.data() + o, &score, 4);
    put_le<int32_t>(b, o + 4, static_cast<int32_t>(piece.size()));
    std::memcpy(b.data() + o + 8, piece.data(), piece.size());
  }
  return b;
}
}  // namespace

TEST(Hostile, TokenizerRefusals) {
  const Bytes good = tiny_tokenizer();
  EXPECT_NO_THROW(load_tokenizer(good));
  {
    Bytes b(good.begin(), good.end() - 1);
    expect_refused<vq::FormatError>("last piece truncated", [&] { load_tokenizer(b); }, {});
  }
  {
    Bytes b = good;
    put_le<int32_t>(b, 4 + 4, -7);  // first piece length negative
    expect_refused<vq::FormatError>("piece length -7", [&] { load_tokenizer(b); }, {"-7"});
  }
  {
    Bytes b = good;
    put_le<int32_t>(b, 4 + 4, 0x7FFFFFFF);
    expect_refused<vq::FormatError>("piece length 2^31-1", [&] { load_tokenizer(b); },
                                    {"2147483647"});
  }
  expect_refused<vq::FormatError>("vocab_size larger than the file",
                                  [&] { load_tokenizer(good, 7); }, {"7"});
}

// ---- every method: NaN / Inf, zero-size and mismatched shapes -----------------------------------

// A method's defaults, with llama.cpp's 32-value q8_0/q4_0 blocks narrowed to the named
// VeloxQuant variant when D is not a multiple of 32 (llama.cpp's layout refuses such a D).
vq::CacheConfig defaults_for(const vq::MethodInfo& m, int64_t D) {
  vq::CacheConfig c = vq::CacheConfig::defaults(m.id);
  if (vq::find_option(m, "block") != nullptr && D % 32 != 0)
    c.set("block", D % 16 == 0 ? "16" : "8");
  return c;
}

TEST(Hostile, NonFiniteToEveryMethod) {
  const int64_t D = 8;
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  int checked = 0;
  for (const vq::MethodInfo& m : vq::methods()) {
    for (float v : bad) {
      for (int where = 0; where < 3; ++where) {  // 0 = keys, 1 = values, 2 = queries
        auto cache = vq::make_cache(defaults_for(m, D), D);
        vq::Tensor k = vqtest::random_tensor(1, 2, 5, D, 1),
                   val = vqtest::random_tensor(1, 2, 5, D, 2);
        vq::Tensor q = vqtest::random_tensor(1, 4, 5, D, 3);
        (where == 0 ? k : where == 1 ? val : q).at(0, 1, 3, 5) = v;
        const char* name = where == 0 ? "keys" : where == 1 ? "values" : "queries";
        expect_refused<vq::InvalidArgument>(m.id + ": non-finite " + name,
                                            [&] { cache->update(k, val, &q); }, {name});
        EXPECT_EQ(cache->offset(), 0) << m.id << ": a refused update must not advance the cache";
        ++checked;
      }
    }
    if (m.make_codec) {
      auto codec = vq::make_codec(defaults_for(m, D), D);
      std::vector<float> x(2 * 6 * D, 0.5f);
      for (float v : bad) {
        x[17] = v;
        expect_refused<vq::InvalidArgument>(m.id + ": codec non-finite",
                                            [&] { (void)codec->encode(x.data(), 2, 6); }, {});
      }
      expect_refused<vq::InvalidArgument>(
          m.id + ": vqkv_compress non-finite",
          [&] {
            (void)vq::vqkv_compress(x.data(), {2, 6, D}, defaults_for(m, D));
          },
          {});
    }
  }
  EXPECT_EQ(checked, static_cast<int>(vq::methods().size()) * 9);
}

TEST(Hostile, ZeroSizeAndMismatchedShapes) {
  const int64_t D = 8;
  for (const vq::MethodInfo& m : vq::methods()) {
    SCOPED_TRACE(m.id);
    const vq::CacheConfig cfg = defaults_for(m, D);
    expect_refused<vq::InvalidArgument>("head_dim 0", [&] { (void)vq::make_cache(cfg, 0); }, {"0"});
    auto c = vq::make_cache(cfg, D);
    const vq::Tensor k = vqtest::random_tensor(1, 2, 4, D, 7);
    expect_refused<vq::InvalidArgument>(
        "D = 0 tensors", [&] { c->update(vq::Tensor(1, 2, 4, 0), vq::Tensor(1, 2, 4, 0)); }, {"0"});
    expect_refused<vq::InvalidArgument>(
        "H = 0 tensors", [&] { c->update(vq::Tensor(1, 0, 4, D), vq::Tensor(1, 0, 4, D)); }, {"0"});
    expect_refused<vq::InvalidArgument>(
        "B = 0 tensors", [&] { c->update(vq::Tensor(0, 2, 4, D), vq::Tensor(0, 2, 4, D)); }, {"0"});
    expect_refused<vq::InvalidArgument>("D mismatch",
                                        [&] {
                                          c->update(vqtest::random_tensor(1, 2, 4, 4, 1),
                                                    vqtest::random_tensor(1, 2, 4, 4, 2));
                                        },
                                        {"4"});
    expect_refused<vq::InvalidArgument>(
        "K/V S mismatch", [&] { c->update(k, vqtest::random_tensor(1, 2, 5, D, 8)); }, {"5"});
    expect_refused<vq::InvalidArgument>(
        "K/V H mismatch", [&] { c->update(k, vqtest::random_tensor(1, 3, 4, D, 8)); }, {"3"});
    const vq::Tensor q3 = vqtest::random_tensor(1, 3, 4, D, 9);
    expect_refused<vq::InvalidArgument>("Hq = 3 not a multiple of H = 2",
                                        [&] { c->update(k, k, &q3); }, {"3"});
    const vq::Tensor qs = vqtest::random_tensor(1, 4, 3, D, 9);
    expect_refused<vq::InvalidArgument>("Q S mismatch", [&] { c->update(k, k, &qs); }, {"3"});
    c->update(k, k);
    expect_refused<vq::InvalidArgument>("H changes between calls",
                                        [&] {
                                          c->update(vqtest::random_tensor(1, 1, 1, D, 3),
                                                    vqtest::random_tensor(1, 1, 1, D, 4));
                                        },
                                        {"1"});
    EXPECT_EQ(c->offset(), 4);
    if (m.make_codec) {
      expect_refused<vq::InvalidArgument>("codec head_dim 0", [&] { (void)vq::make_codec(cfg, 0); },
                                          {"0"});
      auto codec = vq::make_codec(cfg, D);
      std::vector<float> x(D, 0.f);
      expect_refused<vq::InvalidArgument>("codec H = 0",
                                          [&] { (void)codec->encode(x.data(), 0, 1); }, {"0"});
      expect_refused<vq::InvalidArgument>("vqkv D = 0",
                                          [&] {
                                            (void)vq::vqkv_compress(x.data(), {1, 4, 0}, cfg);
                                          },
                                          {"0"});
      expect_refused<vq::InvalidArgument>("vqkv rank 1",
                                          [&] { (void)vq::vqkv_compress(x.data(), {8}, cfg); }, {});
    }
  }
}

// ---- budgets and bit budgets out of range -------------------------------------------------------

TEST(Hostile, OptionValuesOutOfRange) {
  int checked = 0;
  for (const vq::MethodInfo& m : vq::methods()) {
    for (const vq::OptionSpec& o : m.options) {
      if (o.type != vq::OptionType::Int) continue;
      // Below the minimum, above the maximum, and beyond int64.
      std::vector<std::string> bad = {std::to_string(static_cast<long long>(o.min) - 1),
                                      "99999999999999999999999", "12x", ""};
      if (o.max < 9.0e18) bad.push_back(std::to_string(static_cast<long long>(o.max) + 1));
      for (const std::string& v : bad) {
        const std::string spec = m.id + ":" + o.name + "=" + v;
        expect_refused<vq::InvalidArgument>(spec, [&] { (void)vq::CacheConfig::parse(spec); },
                                            {o.name});
        if (!v.empty()) {
          expect_refused<vq::InvalidArgument>(spec, [&] { (void)vq::CacheConfig::parse(spec); },
                                              {v});
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 20);
  // Named cases from the issue.
  expect_refused<vq::InvalidArgument>(
      "budget 0", [] { (void)vq::CacheConfig::parse("h2o:budget=0"); }, {"budget", "0"});
  expect_refused<vq::InvalidArgument>(
      "budget -5", [] { (void)vq::CacheConfig::parse("curdkv:budget=-5"); }, {"-5"});
  expect_refused<vq::InvalidArgument>(
      "sinks >= budget", [] { (void)vq::CacheConfig::parse("h2o:budget=4,n_sink=4"); }, {"4"});
  expect_refused<vq::InvalidArgument>(
      "bit_budget -1", [] { (void)vq::CacheConfig::parse("kvtc:bit_budget=-1"); }, {"-1"});
  expect_refused<vq::InvalidArgument>(
      "bit_choices without 0", [] { (void)vq::CacheConfig::parse("kvtc:bit_choices=1,2,4"); },
      {"bit_choices"});
  expect_refused<vq::InvalidArgument>(
      "bit width 9", [] { (void)vq::CacheConfig::parse("kvtc:bit_choices=0,9"); }, {"9"});
  expect_refused<vq::InvalidArgument>(
      "beta NaN", [] { (void)vq::CacheConfig::parse("kvtc:beta=nan"); }, {"beta"});
  expect_refused<vq::InvalidArgument>(
      "unknown option", [] { (void)vq::CacheConfig::parse("h2o:budgt=5"); }, {"budgt"});
  expect_refused<vq::InvalidArgument>(
      "unknown method", [] { (void)vq::CacheConfig::parse("h3o:budget=5"); }, {"h3o"});
}

// Writes the seed corpora under fuzz/corpus/<target>/ (run from the repository root:
// `vq_make_corpus fuzz/corpus`). Every seed is built by the library itself from fixed seeds, so
// re-running gives the same files. Seeds are small (< 4 KiB each) so that libFuzzer's default
// input length covers them.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "coding/huffman.hpp"
#include "core/rng.hpp"
#include "veloxquant/calibration.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/npy.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/vqkv.hpp"

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

namespace {

fs::path g_root;
int g_count = 0;

void put(const std::string& target, const std::string& name, const Bytes& b) {
  const fs::path dir = g_root / target;
  fs::create_directories(dir);
  vq::write_file_bytes((dir / name).string(), b);
  ++g_count;
}
void put(const std::string& target, const std::string& name, const std::string& s) {
  put(target, name, Bytes(s.begin(), s.end()));
}
std::vector<float> randn(size_t n, uint64_t seed, double scale = 1.0) {
  vq::Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}
void le32(Bytes& b, int32_t v) {
  for (int i = 0; i < 4; ++i)
    b.push_back(static_cast<uint8_t>(static_cast<uint32_t>(v) >> (8 * i)));
}
void f32(Bytes& b, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  le32(b, static_cast<int32_t>(u));
}

void spec_seeds() {
  int i = 0;
  for (const vq::MethodInfo& m : vq::methods()) {
    put("spec", "method_" + m.id, m.id);
    put("spec", "all_" + m.id, vq::CacheConfig::defaults(m.id).to_string(true));
  }
  for (const char* s : {"kvtc:bit_budget=64,bit_choices=0,1,2,4,8,beta=3.5,alloc=waterfill",
                        "h2o:budget=16,n_sink=2", "curdkv:budget=512,n_sink=4,rank_cap=16",
                        "kvtc:bit_choices=0,8", "q8_0:", "full"}) {
    put("spec", "extra_" + std::to_string(i++), std::string(s));
  }
}

void npy_seeds() {
  const std::vector<float> v = randn(24, 11);
  put("npy", "f32_2x3x4", vq::encode_npy(vq::npy_from_float(v.data(), {2, 3, 4})));
  put("npy", "f16_6x4",
      vq::encode_npy(vq::npy_from_float(v.data(), {6, 4}, vq::NpyDtype::Float16)));
  put("npy", "bf16_24", vq::encode_npy(vq::npy_from_float(v.data(), {24}, vq::NpyDtype::BFloat16)));
  put("npy", "f32_0d", vq::encode_npy(vq::npy_from_float(v.data(), {})));
  put("npy", "f32_0x4", vq::encode_npy(vq::npy_from_float(v.data(), {0, 4})));
  const int64_t pos[5] = {0, 3, 9, 10, 12};
  put("npy", "i64_5", vq::encode_npy(vq::npy_from_int64(pos, {5})));
  vq::NpyArray d;
  d.dtype = vq::NpyDtype::Float64;
  d.shape = {3};
  d.bytes.resize(24);
  const double dv[3] = {1.5, -2.25, 1e300};
  std::memcpy(d.bytes.data(), dv, 24);
  put("npy", "f64_3", vq::encode_npy(d));
}

void checkpoint_seeds() {
  vq::ModelConfig c;
  c.dim = 8;
  c.hidden_dim = 12;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.vocab_size = 6;
  c.seq_len = 4;
  const fs::path tmp = fs::temp_directory_path() / "vq_make_corpus_ckpt.bin";
  for (int shared = 0; shared < 2; ++shared) {
    c.shared_classifier = shared == 1;
    vq::Model::random(c, 3 + static_cast<uint64_t>(shared)).save(tmp.string());
    put("checkpoint", shared ? "tiny_shared" : "tiny_unshared", vq::read_file_bytes(tmp.string()));
  }
  fs::remove(tmp);
  Bytes header;
  for (int32_t v : {8, 12, 1, 2, 1, 6, 4}) le32(header, v);
  put("checkpoint", "header_only", header);
}

Bytes tokenizer_file(const std::vector<std::string>& pieces, int32_t max_len) {
  Bytes b;
  le32(b, max_len);
  float score = 0;
  for (const std::string& p : pieces) {
    f32(b, score);
    score -= 0.5f;
    le32(b, static_cast<int32_t>(p.size()));
    b.insert(b.end(), p.begin(), p.end());
  }
  return b;
}

void tokenizer_seeds() {
  put("tokenizer", "tiny", tokenizer_file({"<unk>", "<s>", "</s>", "a", "b", "ab", " ", " a"}, 2));
  std::vector<std::string> p = {"<unk>", "<s>", "</s>"};
  for (int i = 0; i < 256; ++i) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", i);
    p.emplace_back(buf);
  }
  for (const char* s : {" ", "e", "t", "th", "the", " the", "\xc3\xa9", "on", " on", "ce"})
    p.emplace_back(s);
  put("tokenizer", "byte_fallback", tokenizer_file(p, 6));
}

void huffman_seeds() {
  vq::coding::HuffmanEncoder enc;
  vq::Rng rng(21);
  int k = 0;
  for (int width = 1; width <= 8; ++width) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{40}, size_t{300}}) {
      for (int skew = 0; skew < 2; ++skew) {
        std::vector<uint8_t> sym(n);
        for (auto& s : sym) {
          const uint32_t r = static_cast<uint32_t>(rng.uniform() * (1u << width));
          s = static_cast<uint8_t>(skew ? (r % 3 == 0 ? r % (1u << width) : 0) : r % (1u << width));
        }
        Bytes b = {static_cast<uint8_t>(width - 1), static_cast<uint8_t>(n & 0xFF),
                   static_cast<uint8_t>(n >> 8)};
        enc.encode(sym.data(), n, width, b);
        put("huffman",
            "w" + std::to_string(width) + "_n" + std::to_string(n) + "_" + std::to_string(k++), b);
      }
    }
  }
  // Mode-4 streams (coding/range_coder.hpp): segments peaked at their own symbol. The high five
  // bits of byte 0 select the segment length as the target does (the index among n's divisors).
  struct Mode4 {
    int width;
    size_t seg, n_seg;
    bool peaked;
  };
  const Mode4 cases[] = {{1, 64, 4, true},  {2, 1, 30, false}, {3, 10, 12, true},
                         {4, 128, 8, true}, {5, 3, 9, true},   {6, 40, 5, true},
                         {8, 32, 6, true},  {8, 1, 1, false},  {4, 7, 1, true}};
  vq::coding::RangeStreamEncoder renc;
  for (const Mode4& c : cases) {
    const size_t n = c.seg * c.n_seg;
    const uint32_t A = 1u << c.width;
    std::vector<uint8_t> sym(n);
    for (size_t j = 0; j < c.n_seg; ++j) {
      const uint32_t peak = static_cast<uint32_t>(rng.below(A));
      for (size_t i = 0; i < c.seg; ++i) {
        uint32_t v = c.peaked ? peak : static_cast<uint32_t>(rng.below(A));
        while (c.peaked && rng.uniform() < 0.2) v = (v + 1) % A;
        sym[j * c.seg + i] = static_cast<uint8_t>(v);
      }
    }
    unsigned sel = 0;
    for (size_t d = 1; d < c.seg; ++d) sel += n % d == 0 ? 1u : 0u;
    Bytes b = {static_cast<uint8_t>((c.width - 1) | (sel << 3)), static_cast<uint8_t>(n & 0xFF),
               static_cast<uint8_t>(n >> 8)};
    renc.encode(sym.data(), n, c.width, c.seg, b);
    put("huffman",
        "mode4_w" + std::to_string(c.width) + "_n" + std::to_string(n) + "_s" +
            std::to_string(c.seg),
        b);
  }
}

void vqkv_seeds() {
  struct Case {
    const char* name;
    const char* spec;
    std::vector<int64_t> shape;
  };
  const Case cases[] = {
      {"kvtc_sd", "kvtc:bit_budget=16,chunk_tokens=8", {12, 4}},
      {"kvtc_hsd", "kvtc:bit_budget=12", {2, 10, 4}},
      {"kvtc_l2hsd", "kvtc:bit_budget=8,chunk_tokens=4", {1, 2, 1, 9, 4}},
      {"uniform_lhsd", "uniform:bit_budget=8", {2, 1, 8, 4}},
      {"svdq_hsd", "svdq_split", {1, 12, 4}},
      // (q8_0_hsd_v1 and q4_0_sd_v1 in the corpus are the same two cases as version 1 wrote
      // them, blocks along a token's row of all heads, with seeds 36 and 37.)
      {"q8_0_hsd", "q8_0:block=8", {2, 6, 8}},
      {"q4_0_sd", "q4_0:block=16", {5, 16}},
      {"kvtc_empty", "kvtc", {1, 0, 4}},
  };
  uint64_t seed = 31;
  for (const Case& c : cases) {
    int64_t n = 1;
    for (int64_t d : c.shape) n *= d;
    const std::vector<float> x = randn(static_cast<size_t>(n), seed++);
    put("vqkv", c.name, vq::vqkv_compress(x.data(), c.shape, vq::CacheConfig::parse(c.spec)));
  }
}

void roundtrip_seeds() {
  vq::Rng rng(41);
  // sel, H, S, D, scale exponent, inject (>= 3: none), inject position, then int16 values.
  const uint8_t heads[][7] = {{0, 1, 8, 15, 12, 255, 0}, {1, 1, 20, 7, 12, 255, 0},
                              {2, 2, 40, 3, 20, 255, 0}, {0, 3, 1, 31, 2, 255, 0},
                              {1, 0, 0, 3, 12, 255, 0},  {2, 1, 5, 0, 12, 255, 0},
                              {0, 1, 4, 7, 12, 0, 9},    {1, 1, 4, 7, 12, 1, 3}};
  int k = 0;
  for (const auto& h : heads) {
    Bytes b(h, h + 7);
    const size_t n = static_cast<size_t>((1 + h[1] % 4) * (h[2] % 64) * (1 + h[3] % 32));
    for (size_t i = 0; i < n; ++i) {
      const auto v = static_cast<int16_t>(std::lround(rng.normal() * 2000.0));
      b.push_back(static_cast<uint8_t>(v & 0xFF));
      b.push_back(static_cast<uint8_t>(static_cast<uint16_t>(v) >> 8));
    }
    put("roundtrip", "case_" + std::to_string(k++), b);
  }
}

void vqcal_seeds() {
  // Small calibrations fitted on random rows: per-head and shared-heads layouts.
  struct Shape {
    const char* name;
    int64_t L, H, D;
    bool shared;
  };
  for (const Shape& s : {Shape{"l1_h1_d2", 1, 1, 2, false}, Shape{"l1_h2_d3", 1, 2, 3, false},
                         Shape{"l2_shared_d2", 2, 3, 2, true}}) {
    vq::Calibration c;
    c.n_layers = s.L;
    c.n_kv_heads = s.H;
    c.head_dim = s.D;
    c.shared_heads = s.shared;
    c.tokens = 64;
    c.chunk_tokens = 16;
    for (int64_t i = 0; i < s.L * c.groups() * 2; ++i) {
      const std::vector<float> x =
          randn(static_cast<size_t>(64 * s.D), 900 + static_cast<uint64_t>(i));
      c.entries.push_back(vq::fit_calibration_entry(x.data(), 64, s.D, 16));
    }
    const Bytes b = c.serialize();
    put("vqcal", s.name, b);
    if (std::string(s.name) == "l1_h1_d2") {
      put("vqcal", "truncated", Bytes(b.begin(), b.begin() + static_cast<long>(b.size() / 2)));
      Bytes flipped = b;
      flipped[60] ^= 0x10;
      put("vqcal", "bitflip", flipped);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  g_root = argc > 1 ? fs::path(argv[1]) : fs::path("fuzz/corpus");
  spec_seeds();
  npy_seeds();
  checkpoint_seeds();
  tokenizer_seeds();
  huffman_seeds();
  vqkv_seeds();
  roundtrip_seeds();
  vqcal_seeds();
  std::printf("wrote %d seed files under %s\n", g_count, g_root.string().c_str());
  return 0;
}

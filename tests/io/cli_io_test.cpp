// The interface commands of the CLI against the library: compress writes the bytes
// vqkv_compress produces, decompress the values vqkv_decompress produces, info reports the file,
// evict writes the positions a cache fed the same stream keeps; user errors exit 1 with one line.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/npy.hpp"
#include "veloxquant/vqkv.hpp"

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int status = -1;
  std::string out, err;
};

class CliIo : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(VQ_CLI_PATH)) GTEST_SKIP() << "CLI not built: " << VQ_CLI_PATH;
    dir_ = fs::temp_directory_path() / ("vq_cli_io_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  CliRun cli(const std::string& args) const {
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    const std::string cmd =
        std::string(VQ_CLI_PATH) + " " + args + " >" + out + " 2>" + err + " </dev/null";
    CliRun r;
    const int rc = std::system(cmd.c_str());
    r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }
  static std::string slurp(const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  // Writes [dims...] random floats as an .npy and returns the values.
  std::vector<float> write_random(const std::string& name, std::vector<int64_t> shape,
                                  uint64_t seed, vq::NpyDtype t = vq::NpyDtype::Float32) const {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    vq::Rng rng(seed);
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i)
      x[i] = static_cast<float>(rng.normal() * (1.0 + 2.0 / (1.0 + static_cast<double>(i % 16))));
    const vq::NpyArray a = vq::npy_from_float(x.data(), shape, t);
    vq::write_npy(path(name), a);
    return a.to_float();
  }

  fs::path dir_;
};

TEST_F(CliIo, CompressMatchesLibraryBytesAndDecompressRoundTrips) {
  for (const std::string spec : {"kvtc:bit_budget=48", "q8_0:block=16", "uniform:bit_budget=32"}) {
    const std::vector<float> x = write_random("kv.npy", {2, 2, 3, 50, 16}, 4);
    const CliRun c = cli("compress --method " + spec + " " + path("kv.npy") + " " +
                         path("kv.vqkv") + " --verify --json " + path("c.json"));
    ASSERT_EQ(c.status, 0) << c.err;
    const std::vector<uint8_t> file = vq::read_file_bytes(path("kv.vqkv"));
    const std::vector<uint8_t> lib =
        vq::vqkv_compress(x.data(), {2, 2, 3, 50, 16}, vq::CacheConfig::parse(spec));
    EXPECT_EQ(file, lib) << spec;
    const nlohmann::json j = nlohmann::json::parse(slurp(path("c.json")));
    EXPECT_EQ(j["file_bytes"].get<int64_t>(), static_cast<int64_t>(file.size()));
    EXPECT_GE(j["error"]["relative_rmse"].get<double>(), 0.0);

    const CliRun d = cli("decompress " + path("kv.vqkv") + " " + path("back.npy"));
    ASSERT_EQ(d.status, 0) << d.err;
    const vq::NpyArray back = vq::read_npy(path("back.npy"));
    EXPECT_EQ(back.dtype, vq::NpyDtype::Float32);
    EXPECT_EQ(back.shape, (std::vector<int64_t>{2, 2, 3, 50, 16}));
    EXPECT_EQ(back.to_float(), vq::vqkv_decompress(lib.data(), lib.size()).values);
  }
}

TEST_F(CliIo, InfoReportsHeaderAndSections) {
  write_random("k.npy", {4, 30, 8}, 5, vq::NpyDtype::Float16);
  ASSERT_EQ(cli("-q compress -m kvtc:bit_budget=16 " + path("k.npy") + " " + path("k.vqkv")).status,
            0);
  const CliRun r = cli("info --json - " + path("k.vqkv"));
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const std::vector<uint8_t> file = vq::read_file_bytes(path("k.vqkv"));
  EXPECT_EQ(j["file_bytes"].get<uint64_t>(), file.size());
  EXPECT_EQ(j["source_dtype"], "float16");
  EXPECT_EQ(j["layout"], "[H, S, D]");
  EXPECT_EQ(j["sections"].size(), 4u);
  uint64_t sum = j["header_bytes"].get<uint64_t>();
  for (const auto& s : j["sections"]) sum += s["bytes"].get<uint64_t>();
  EXPECT_EQ(sum, file.size());
  EXPECT_NEAR(j["compression_ratio"].get<double>(), 4.0 * 30 * 8 * 2 / double(file.size()), 1e-9);
  const CliRun text = cli("info " + path("k.vqkv"));
  EXPECT_NE(text.out.find("checksums OK"), std::string::npos);
}

TEST_F(CliIo, UserErrorsExitOneWithOneLine) {
  write_random("x.npy", {3, 20, 8}, 6);
  ASSERT_EQ(cli("-q compress -m q4_0:block=8 " + path("x.npy") + " " + path("x.vqkv")).status, 0);
  std::vector<uint8_t> f = vq::read_file_bytes(path("x.vqkv"));
  f[f.size() / 2] ^= 0x10;
  vq::write_file_bytes(path("bad.vqkv"), f);
  f.resize(f.size() / 3);
  vq::write_file_bytes(path("short.vqkv"), f);
  for (const std::string& args :
       {"decompress " + path("bad.vqkv") + " " + path("o.npy"),
        "decompress " + path("short.vqkv") + " " + path("o.npy"), "info " + path("bad.vqkv"),
        "info " + path("missing.vqkv"),
        "compress -m q4_0:block=8 " + path("missing.npy") + " " + path("o"),
        "compress -m h2o:budget=8 " + path("x.npy") + " " + path("o"),
        "compress -m kvtc:nope=1 " + path("x.npy") + " " + path("o"),
        "compress -m q8_0:block=8 " + path("x.vqkv") + " " + path("o"),
        "evict -m kvtc --keys " + path("x.npy") + " --values " + path("x.npy") + " --out " +
            path("o"),
        "evict -m h2o:budget=4 --keys " + path("x.npy") + " --values " + path("x.npy") +
            " --prefill 21 --out " + path("o")}) {
    const CliRun r = cli(args);
    EXPECT_EQ(r.status, 1) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("veloxquant: error: ", 0), 0u) << r.err;
  }
}

// Feed the stream the way the CLI documents it and return sorted kept positions per head.
std::vector<std::vector<int64_t>> library_evict(const std::string& spec, const vq::Tensor& K,
                                                const vq::Tensor& V, const vq::Tensor* Q,
                                                int64_t prefill) {
  auto cache = vq::make_cache(vq::CacheConfig::parse(spec), K.D());
  auto feed = [&](int64_t s0, int64_t n) {
    const vq::Tensor k = K.slice_tokens(s0, n), v = V.slice_tokens(s0, n);
    if (Q) {
      const vq::Tensor q = Q->slice_tokens(s0, n);
      cache->update(k, v, &q);
    } else {
      cache->update(k, v);
    }
  };
  if (prefill > 0) feed(0, prefill);
  for (int64_t s = prefill; s < K.S(); ++s) feed(s, 1);
  const vq::FetchResult r = cache->fetch();
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(K.H()));
  for (int64_t h = 0; h < K.H(); ++h)
    out[static_cast<size_t>(h)].assign(r.positions.begin() + h * r.n_kept,
                                       r.positions.begin() + (h + 1) * r.n_kept);
  return out;
}

TEST_F(CliIo, EvictMatchesLibrary) {
  const int64_t H = 2, S = 90, D = 16;
  const vq::Tensor K = vqtest::random_tensor(1, H, S, D, 21);
  const vq::Tensor V = vqtest::random_tensor(1, H, S, D, 22);
  const vq::Tensor Q = vqtest::random_tensor(1, 2 * H, S, D, 23);
  auto save = [&](const vq::Tensor& t, const std::string& name) {
    vq::write_npy(path(name), vq::npy_from_float(t.data(), {t.H(), t.S(), t.D()}));
  };
  save(K, "k.npy");
  save(V, "v.npy");
  save(Q, "q.npy");
  struct Case {
    std::string spec;
    int64_t prefill;
    bool queries;
  };
  for (const Case& c : {Case{"h2o:budget=24,n_sink=2", 0, false}, Case{"h2o:budget=24", 40, false},
                        Case{"curdkv:budget=20", 30, false}, Case{"curdkv:budget=20", 30, true},
                        Case{"full", 10, false}}) {
    const std::string args = "evict -m " + c.spec + " --keys " + path("k.npy") + " --values " +
                             path("v.npy") + (c.queries ? " --queries " + path("q.npy") : "") +
                             " --prefill " + std::to_string(c.prefill) + " --out " +
                             path("kept.npy") + " --json " + path("e.json");
    const CliRun r = cli(args);
    ASSERT_EQ(r.status, 0) << args << "\n" << r.err;
    const vq::NpyArray kept = vq::read_npy(path("kept.npy"));
    ASSERT_EQ(kept.dtype, vq::NpyDtype::Int64);
    const auto want = library_evict(c.spec, K, V, c.queries ? &Q : nullptr, c.prefill);
    ASSERT_EQ(kept.shape, (std::vector<int64_t>{H, static_cast<int64_t>(want[0].size())}));
    const std::vector<int64_t> got = kept.to_int64();
    for (int64_t h = 0; h < H; ++h) {
      const std::vector<int64_t> row(got.begin() + h * kept.shape[1],
                                     got.begin() + (h + 1) * kept.shape[1]);
      EXPECT_EQ(row, want[static_cast<size_t>(h)]) << c.spec << " head " << h;
      EXPECT_TRUE(std::is_sorted(row.begin(), row.end()));
    }
    const nlohmann::json j = nlohmann::json::parse(slurp(path("e.json")));
    EXPECT_EQ(j["n_kept"].get<int64_t>(), kept.shape[1]);
  }
}

}  // namespace

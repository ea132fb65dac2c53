// The CLI's file safety and messages (issue 16): compress never writes a file its decompress
// refuses, an output that names an input is refused, outputs are atomic (a failed write leaves
// no partial file and keeps an old one), float16 outputs refuse Inf, '-' is stdout, and the
// messages name what went wrong.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "veloxquant/calibration.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/npy.hpp"
#include "veloxquant/vqkv.hpp"

namespace {

namespace fs = std::filesystem;

struct CliResult {
  int status = -1;
  std::string out, err;
};

class CliSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(VQ_CLI_PATH)) GTEST_SKIP() << "CLI not built: " << VQ_CLI_PATH;
    dir_ = fs::temp_directory_path() / ("vq_cli_safety_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Runs `veloxquant ARGS` (prefix: shell words placed before the command, e.g. ulimit).
  CliResult cli(const std::string& args, const std::string& prefix = "") const {
    const std::string out = (dir_ / "stdout.bin").string(), err = (dir_ / "stderr.txt").string();
    const std::string cmd = "(" + prefix + " exec " + std::string(VQ_CLI_PATH) + " " + args +
                            ") >" + out + " 2>" + err + " </dev/null";
    CliResult r;
    const int rc = std::system(cmd.c_str());
    r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    fs::remove(out);
    fs::remove(err);
    return r;
  }
  static std::string slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  static void spit(const std::string& p, const std::string& s) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << s;
  }
  // [2, 64, 16] random floats (one value planted at [1, 5, 3] when given) as an .npy.
  std::vector<float> write_x(const std::string& name, float planted = 0.0f,
                             std::vector<int64_t> shape = {2, 64, 16}) const {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    vq::Rng rng(11);
    std::vector<float> x(n);
    for (auto& v : x) v = static_cast<float>(rng.normal());
    if (planted != 0.0f) x[(1 * 64 + 5) * 16 + 3] = planted;
    vq::write_npy(path(name), vq::npy_from_float(x.data(), shape, vq::NpyDtype::Float32));
    return x;
  }
  // Files in the test directory whose name contains ".tmp." (left-over temporaries).
  int temporaries() const {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir_))
      n += e.path().filename().string().find(".tmp.") != std::string::npos;
    return n;
  }

  fs::path dir_;
};

TEST_F(CliSafety, CompressRefusesValuesItsDecompressCouldNotDecode) {
  // The case: 7e4 with kivi compressed, exit 0, and decompress then refused the file.
  for (const auto& [spec, v] : std::vector<std::pair<std::string, float>>{
           {"kivi", 7e4f}, {"gear", 7e4f}, {"q8_0:block=8", 1e38f}, {"q4_0:block=8", 1e38f}}) {
    write_x("x.npy", v);
    const CliResult r = cli("compress -m " + spec + " " + path("x.npy") + " " + path("x.vqkv"));
    EXPECT_EQ(r.status, 1) << spec << ": " << r.err;
    EXPECT_NE(r.err.find("at [1, 5, 3] is outside the range of " + spec.substr(0, spec.find(':'))),
              std::string::npos)
        << r.err;
    EXPECT_FALSE(fs::exists(path("x.vqkv"))) << spec << ": a refused compress left a file";
    // --verify used to leave the output behind too.
    const CliResult rv =
        cli("compress --verify -m " + spec + " " + path("x.npy") + " " + path("x.vqkv"));
    EXPECT_EQ(rv.status, 1);
    EXPECT_FALSE(fs::exists(path("x.vqkv")));
  }
}

TEST_F(CliSafety, AnOutputThatIsAnInputIsRefusedNamingBoth) {
  write_x("x.npy");
  const std::string x = path("x.npy");
  const std::string before = slurp(x);
  CliResult r = cli("compress -m q8_0:block=8 " + x + " " + x);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("output '" + x + "' is the same file as input '" + x + "'"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(slurp(x), before) << "the input was overwritten";
  // Another spelling of the same file, a symlink and a hard link are the same file too.
  fs::create_symlink(x, path("link.npy"));
  fs::create_hard_link(x, path("hard.npy"));
  for (const std::string& other :
       {dir_.string() + "/./x.npy", path("link.npy"), path("hard.npy")}) {
    r = cli("compress -m q8_0:block=8 " + x + " " + other);
    EXPECT_EQ(r.status, 1) << other;
    EXPECT_NE(r.err.find("is the same file as input"), std::string::npos) << other << r.err;
  }
  EXPECT_EQ(slurp(x), before);
  // decompress a.vqkv a.vqkv; evict --keys k.npy --out k.npy; --json onto the input.
  ASSERT_EQ(cli("compress -m q8_0:block=8 " + x + " " + path("a.vqkv")).status, 0);
  const std::string a = slurp(path("a.vqkv"));
  r = cli("decompress " + path("a.vqkv") + " " + path("a.vqkv"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("is the same file as input"), std::string::npos) << r.err;
  r = cli("info " + path("a.vqkv") + " --json " + path("a.vqkv"));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(slurp(path("a.vqkv")), a);
  r = cli("evict -m h2o:budget=8 --keys " + x + " --values " + x + " --out " + x);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--out '" + x + "' is the same file as --keys '" + x + "'"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(slurp(x), before);
}

TEST_F(CliSafety, FailedWritesLeaveNoPartialFileAndKeepTheOldOne) {
  // A file-size limit stands in for a full disk: the write fails part-way (EFBIG).
  write_x("x.npy", 0.0f, {4, 256, 16});
  const std::string limit = "ulimit -f 4; trap '' XFSZ;";  // 4 KiB: below every output here
  ASSERT_EQ(cli("compress -m q8_0:block=8 " + path("x.npy") + " " + path("a.vqkv")).status, 0);
  spit(path("out.vqkv"), "OLD");
  spit(path("out.npy"), "OLD");
  CliResult r = cli("compress -m q8_0:block=8 " + path("x.npy") + " " + path("out.vqkv"), limit);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("failed writing '" + path("out.vqkv") + "'"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(path("out.vqkv")), "OLD");
  r = cli("decompress " + path("a.vqkv") + " " + path("out.npy"), limit);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(slurp(path("out.npy")), "OLD");
  r = cli("evict -m h2o:budget=200 --keys " + path("x.npy") + " --values " + path("x.npy") +
              " --out " + path("out.npy"),
          limit);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(slurp(path("out.npy")), "OLD");
  // Nothing new under the target names, and no temporary left behind.
  fs::remove(path("out.vqkv"));
  r = cli("compress -m q8_0:block=8 " + path("x.npy") + " " + path("out.vqkv"), limit);
  EXPECT_EQ(r.status, 1);
  EXPECT_FALSE(fs::exists(path("out.vqkv")));
  EXPECT_EQ(temporaries(), 0);
  // Without the limit the same commands succeed and replace the old files.
  EXPECT_EQ(cli("compress -m q8_0:block=8 " + path("x.npy") + " " + path("out.vqkv")).status, 0);
  EXPECT_EQ(slurp(path("out.vqkv")), slurp(path("a.vqkv")));
  EXPECT_EQ(cli("decompress " + path("a.vqkv") + " " + path("out.npy")).status, 0);
  EXPECT_EQ(vq::read_npy(path("out.npy")).shape, (std::vector<int64_t>{4, 256, 16}));
  EXPECT_EQ(temporaries(), 0);
}

TEST_F(CliSafety, DecompressToFloat16RefusesInfUnlessClampIsAsked) {
  write_x("x.npy", 1e6f);
  ASSERT_EQ(cli("compress -m q8_0:block=8 " + path("x.npy") + " " + path("a.vqkv")).status, 0);
  CliResult r = cli("decompress --dtype float16 " + path("a.vqkv") + " " + path("y.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("at [1, 5, 3]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("outside float16's range [-65504, 65504]"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("y.npy")));
  r = cli("decompress --dtype float16 --clamp " + path("a.vqkv") + " " + path("y.npy"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("clamped"), std::string::npos) << r.err;
  const std::vector<float> y = vq::read_npy(path("y.npy")).to_float();
  EXPECT_EQ(y[(1 * 64 + 5) * 16 + 3], 65504.0f);
  for (float v : y) ASSERT_TRUE(std::isfinite(v));
  // float32 keeps the value.
  EXPECT_EQ(cli("decompress --dtype float32 " + path("a.vqkv") + " " + path("y.npy")).status, 0);
}

TEST_F(CliSafety, DashMeansStdout) {
  const std::vector<float> x = write_x("x.npy");
  CliResult r = cli("compress -m q8_0:block=8 " + path("x.npy") + " -");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<uint8_t> want =
      vq::vqkv_compress(x.data(), {2, 64, 16}, vq::CacheConfig::parse("q8_0:block=8"));
  EXPECT_EQ(r.out, std::string(want.begin(), want.end()));
  EXPECT_FALSE(fs::exists(path("-")));
  spit(path("a.vqkv"), r.out);
  r = cli("decompress " + path("a.vqkv") + " -");
  ASSERT_EQ(r.status, 0) << r.err;
  const vq::NpyArray back = vq::parse_npy(r.out.data(), r.out.size());
  EXPECT_EQ(back.shape, (std::vector<int64_t>{2, 64, 16}));
  // A device is written in place (not replaced by a regular file), a symlink is written through.
  EXPECT_EQ(cli("compress -m q8_0:block=8 " + path("x.npy") + " /dev/null").status, 0);
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  spit(path("real.vqkv"), "OLD");
  fs::create_symlink(path("real.vqkv"), path("via.vqkv"));
  EXPECT_EQ(cli("compress -m q8_0:block=8 " + path("x.npy") + " " + path("via.vqkv")).status, 0);
  EXPECT_TRUE(fs::is_symlink(path("via.vqkv")));
  EXPECT_EQ(slurp(path("real.vqkv")), std::string(want.begin(), want.end()));
  // Two outputs on stdout are refused.
  r = cli("compress -m q8_0:block=8 " + path("x.npy") + " - --json -");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("more than one output goes to stdout"), std::string::npos) << r.err;
}

TEST_F(CliSafety, MessagesNameTheMistake) {
  CliResult r = cli("frobnicate");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("compress"), std::string::npos) << r.err;
  write_x("x.npy");
  r = cli("evict -m h2o:budget=8 --keys " + path("x.npy") + " --values " + path("x.npy") +
          " --prefill -1 --out " + path("k.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_LT(r.err.size(), 200u) << r.err;
  EXPECT_NE(r.err.find("-1"), std::string::npos) << r.err;
  // bit_budget beyond what bit_choices can spend on this head_dim (16): refused with the limit.
  r = cli("compress -m kvtc:bit_budget=256 " + path("x.npy") + " " + path("a.vqkv"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("bit_budget = 256 asks 16 bits per value on head_dim 16"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("bit_budget <= 128"), std::string::npos) << r.err;
  // An integer .npy is read but not compressed; the message says what compress takes.
  const std::vector<int64_t> ints(32, 1);
  vq::write_npy(path("i.npy"), vq::npy_from_int64(ints.data(), {2, 16}));
  r = cli("compress -m q8_0:block=8 " + path("i.npy") + " " + path("a.vqkv"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("is not a float type"), std::string::npos) << r.err;
  // --help shows defaults.
  r = cli("decompress --help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("=source"), std::string::npos) << r.out;
  r = cli("generate --help");
  for (const char* d : {"=256", "=full", "=0"})
    EXPECT_NE(r.out.find(d), std::string::npos) << d << " missing in\n" << r.out;
}

TEST_F(CliSafety, PlotIsCheckedBeforeTheEvaluationRuns) {
  // A CLI outside any source tree, with no installed share/veloxquant/plot_eval.py next to it:
  // --plot fails at once (before loading a model or evaluating anything), naming the script.
  fs::create_directories(dir_ / "prefix" / "bin");
  const fs::path exe = dir_ / "prefix" / "bin" / "veloxquant";
  fs::copy_file(VQ_CLI_PATH, exe);
  const std::string cmd = "cd " + dir_.string() + " && " + exe.string() +
                          " eval --model /nonexistent/model.bin --plot p.png >/dev/null 2>" +
                          path("err.txt");
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 1);
  const std::string err = slurp(path("err.txt"));
  EXPECT_NE(err.find("plot_eval.py not found"), std::string::npos) << err;
  EXPECT_EQ(err.find("model.bin"), std::string::npos) << "the model was looked at first: " << err;
  // Installed beside it (<prefix>/share/veloxquant), the script is found: the error is now the
  // missing model (or, without matplotlib, the check for it).
  fs::create_directories(dir_ / "prefix" / "share" / "veloxquant");
  fs::copy_file(std::string(VQ_SOURCE_DIR) + "/scripts/plot_eval.py",
                dir_ / "prefix" / "share" / "veloxquant" / "plot_eval.py");
  const int rc2 = std::system(cmd.c_str());
  EXPECT_EQ(WIFEXITED(rc2) ? WEXITSTATUS(rc2) : -1, 1);
  const std::string err2 = slurp(path("err.txt"));
  EXPECT_EQ(err2.find("plot_eval.py not found"), std::string::npos) << err2;
}

TEST_F(CliSafety, EvictTakesALayerOfADumpKvFile) {
  // [L = 2, 2, H = 2, S = 40, D = 8]: layer 1's keys and values as separate [H, S, D] files
  // must give the same kept positions as --kv with --layer 1.
  const int64_t L = 2, H = 2, S = 40, D = 8;
  vq::Rng rng(3);
  std::vector<float> kv(static_cast<size_t>(L * 2 * H * S * D));
  for (auto& v : kv) v = static_cast<float>(rng.normal());
  vq::write_npy(path("kv.npy"),
                vq::npy_from_float(kv.data(), {L, 2, H, S, D}, vq::NpyDtype::Float32));
  const size_t block = static_cast<size_t>(H * S * D);
  vq::write_npy(path("k.npy"),
                vq::npy_from_float(kv.data() + 2 * block, {H, S, D}, vq::NpyDtype::Float32));
  vq::write_npy(path("v.npy"),
                vq::npy_from_float(kv.data() + 3 * block, {H, S, D}, vq::NpyDtype::Float32));
  ASSERT_EQ(cli("evict -m curdkv:budget=12 --keys " + path("k.npy") + " --values " + path("v.npy") +
                " --prefill 16 --out " + path("a.npy"))
                .status,
            0);
  const CliResult r = cli("evict -m curdkv:budget=12 --kv " + path("kv.npy") +
                          " --layer 1 --prefill 16 --out " + path("b.npy"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(slurp(path("a.npy")), slurp(path("b.npy")));
  const CliResult bad =
      cli("evict -m curdkv:budget=12 --kv " + path("kv.npy") + " --layer 2 --out " + path("c.npy"));
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("--layer 2 is outside [0, 1]"), std::string::npos) << bad.err;
}

TEST_F(CliSafety, EvictCompressRatioKeepsTheOneShotChoice) {
  // knorm at ratio 0.875 over S = 100: each head keeps int(12.5) = 12 tokens, the 12 lowest-norm
  // keys; the bad inputs are refused naming the value.
  const int64_t H = 2, S = 100, D = 8;
  vq::Rng rng(5);
  std::vector<float> k(static_cast<size_t>(H * S * D)), v(k.size());
  for (auto& x : k) x = static_cast<float>(rng.normal());
  for (auto& x : v) x = static_cast<float>(rng.normal());
  vq::write_npy(path("k.npy"), vq::npy_from_float(k.data(), {H, S, D}, vq::NpyDtype::Float32));
  vq::write_npy(path("v.npy"), vq::npy_from_float(v.data(), {H, S, D}, vq::NpyDtype::Float32));
  const std::string kv = " --keys " + path("k.npy") + " --values " + path("v.npy");
  const CliResult r = cli("evict -m knorm --compress-ratio 0.875" + kv + " --out " + path("o.npy"));
  ASSERT_EQ(r.status, 0) << r.err;
  const vq::NpyArray a = vq::read_npy(path("o.npy"));
  ASSERT_EQ(a.shape, (std::vector<int64_t>{H, 12}));
  const std::vector<int64_t> kept = a.to_int64();
  for (int64_t h = 0; h < H; ++h) {
    std::vector<std::pair<double, int64_t>> norms;
    for (int64_t s = 0; s < S; ++s) {
      double n = 0;
      for (int64_t d = 0; d < D; ++d) n += std::pow(k[static_cast<size_t>((h * S + s) * D + d)], 2);
      norms.emplace_back(n, s);
    }
    std::sort(norms.begin(), norms.end());
    std::vector<int64_t> want;
    for (int i = 0; i < 12; ++i) want.push_back(norms[static_cast<size_t>(i)].second);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(std::vector<int64_t>(kept.begin() + h * 12, kept.begin() + (h + 1) * 12), want);
  }
  CliResult bad = cli("evict -m knorm --compress-ratio 1" + kv + " --out " + path("p.npy"));
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("compression ratio = 1 is outside [0, 1)"), std::string::npos) << bad.err;
  // -1 given explicitly is a ratio like any other, not a silent switch to the decode protocol
  bad = cli("evict -m knorm --compress-ratio -1" + kv + " --out " + path("p.npy"));
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("compression ratio = -1 is outside [0, 1)"), std::string::npos) << bad.err;
  bad = cli("evict -m full --compress-ratio 0.5" + kv + " --out " + path("p.npy"));
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("'full' has no one-shot scoring"), std::string::npos) << bad.err;
  // The methods scored last (issue 17) are accepted: int(100 * 0.5) = 50 tokens per head.
  for (const std::string m : {"keyformer", "morphkv", "kvzip", "nestedkv"}) {
    const CliResult ok =
        cli("evict -m " + m + " --compress-ratio 0.5" + kv + " --out " + path("q.npy"));
    ASSERT_EQ(ok.status, 0) << m << ": " << ok.err;
    EXPECT_EQ(vq::read_npy(path("q.npy")).shape, (std::vector<int64_t>{H, 50})) << m;
  }
}

TEST_F(CliSafety, ANonFiniteValueIsReportedWithItsStreamPosition) {
  // A NaN at token 10 of [H = 1, S = 20, D = 8]: fed one token at a time, the update holding
  // it starts at position 10; fed in one prefill, it is s = 10 of an update at position 0.
  std::vector<float> x(20 * 8, 0.5f);
  x[10 * 8 + 2] = std::nanf("");
  vq::write_npy(path("k.npy"), vq::npy_from_float(x.data(), {1, 20, 8}, vq::NpyDtype::Float32));
  CliResult r = cli("evict -m h2o:budget=8 --keys " + path("k.npy") + " --values " + path("k.npy") +
                    " --out " + path("o.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("update starting at position 10"), std::string::npos) << r.err;
  r = cli("evict -m h2o:budget=8 --prefill 20 --keys " + path("k.npy") + " --values " +
          path("k.npy") + " --out " + path("o.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("s=10"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("update starting at position 0"), std::string::npos) << r.err;
}

// With the real models: a calibration records its model and is refused on another one; a
// tokenizer of another model is named as such; empty option values are named.
TEST_F(CliSafety, CalibrationsAreTiedToTheirModel) {
  const std::string st = vq::locate_model_file("stories260K.bin");
  const std::string xs = vq::locate_model_file("llama2xs.bin");
  const std::string tok105 = vq::locate_model_file("tok105.bin");
  if (st.empty() || xs.empty() || tok105.empty())
    GTEST_SKIP() << "stories260K.bin, llama2xs.bin or tok105.bin not found (searched "
                    "$VQ_MODELS_DIR and ../shared/models)";
  const std::string cal = path("st.vqcal");
  CliResult r =
      cli("-q calibrate --model " + st + " --max-tokens 600 --chunk-tokens 64 --out " + cal);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string spec = "kvtc:bit_budget=16,basis=" + cal;
  r = cli("perplexity --model " + st + " --text-string 'Lily saw a cat.' --method " + spec +
          ",chunk_tokens=64");
  EXPECT_EQ(r.status, 0) << r.err;
  r = cli("perplexity --model " + xs + " --text-string 'Lily saw a cat.' --method " + spec +
          ",chunk_tokens=64");
  EXPECT_EQ(r.status, 1);
  char want[17];
  std::snprintf(want, sizeof want, "%016llx",
                static_cast<unsigned long long>(vq::model_digest(st)));
  EXPECT_NE(r.err.find(std::string("model with digest ") + want), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'" + xs + "' has digest"), std::string::npos) << r.err;
  r = cli("perplexity --allow-foreign-calibration --model " + xs +
          " --text-string 'Lily saw a cat.' --method " + spec + ",chunk_tokens=64");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("warning"), std::string::npos) << r.err;
  // Too few tokens for a calibration.
  r = cli("calibrate --model " + st + " --max-tokens 1 --out " + path("one.vqcal"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("too few"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("one.vqcal")));
  // A tokenizer of another model (105 pieces for a 512-token vocabulary).
  r = cli("perplexity --model " + st + " --tokenizer " + tok105 + " --text-string 'Lily'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("holds 105 pieces but the model's vocabulary has 512"), std::string::npos)
      << r.err;
  // Empty values are named, not reported as missing.
  r = cli("perplexity --model " + st + " --text-string ''");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--text-string is empty"), std::string::npos) << r.err;
  r = cli("eval --model " + st + " --methods '' --max-tokens 64");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("names no method"), std::string::npos) << r.err;
}

}  // namespace

namespace {

// Every output is checked before the command does any work: a second output (--json) that
// cannot be written must not fail the command after its first output has replaced a file.
TEST_F(CliSafety, ABadSecondOutputFailsBeforeTheFirstIsWritten) {
  write_x("x.npy");
  ASSERT_EQ(cli("compress -m q8_0:block=8 " + path("x.npy") + " " + path("a.vqkv")).status, 0);
  spit(path("keep"), "KEEP");
  const std::string bad = path("no_such_dir/j.json");
  CliResult r =
      cli("compress -m q8_0:block=8 " + path("x.npy") + " " + path("keep") + " --json " + bad);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("cannot write --json '" + bad + "': the directory '" + path("no_such_dir") +
                       "' does not exist"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(slurp(path("keep")), "KEEP");
  r = cli("decompress " + path("a.vqkv") + " " + path("keep") + " --json " + bad);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(slurp(path("keep")), "KEEP");
  r = cli("evict -m h2o:budget=8 --keys " + path("x.npy") + " --values " + path("x.npy") +
          " --out " + path("keep") + " --json " + bad);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(slurp(path("keep")), "KEEP");
  // a directory named as an output file
  r = cli("compress -m q8_0:block=8 " + path("x.npy") + " " + dir_.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
  // the same check on the commands that only write JSON
  r = cli("methods --json " + bad);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("cannot write --json"), std::string::npos) << r.err;
  r = cli("bench kernels --json " + bad);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("cannot write --json"), std::string::npos) << r.err;
  EXPECT_EQ(temporaries(), 0);
  // a benchmark whose every row failed says so in its exit status, not only in its table
  r = cli("bench memory --methods nope --tokens 64 --heads 1 --query-heads 1 --update 64");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("every row failed (1); the first: unknown method 'nope'"), std::string::npos)
      << r.err;
}

// A directory or an endless stream given as text is named in the error, not read as empty text
// or until memory runs out.
TEST_F(CliSafety, TextThatIsADirectoryOrAnEndlessStreamIsRefused) {
  const std::string st = vq::locate_model_file("stories260K.bin");
  if (st.empty()) GTEST_SKIP() << "stories260K.bin not found";
  CliResult r = cli("perplexity --model " + st + " --text " + dir_.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("'" + dir_.string() + "': it is a directory"), std::string::npos) << r.err;
  r = cli("tokenize --model " + st + " --text " + dir_.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("it is a directory"), std::string::npos) << r.err;
  r = cli("perplexity --model " + st + " --text /dev/zero --max-tokens 10");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("'/dev/zero': it is not a regular file and runs past 1073741824 bytes"),
            std::string::npos)
      << r.err;
  r = cli("dump-kv --model " + st + " --prompt '' -o " + path("d.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--prompt is empty"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("d.npy")));
}

// calibrate --out writes like every other output: through a symlink to its target, into a FIFO
// in place, never replacing the link or the node.
TEST_F(CliSafety, CalibrateWritesThroughLinksAndIntoFifos) {
  const std::string st = vq::locate_model_file("stories260K.bin");
  if (st.empty()) GTEST_SKIP() << "stories260K.bin not found";
  const std::string target = path("target.vqcal"), link = path("link.vqcal");
  spit(target, "OLD");
  fs::create_symlink(target, link);
  CliResult r = cli("-q calibrate --model " + st + " --max-tokens 300 --out " + link);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_NO_THROW(vq::Calibration::load(target));
  const std::string fifo = path("cal.fifo"), got = path("from_fifo.vqcal");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = cli("-q calibrate --model " + st + " --max-tokens 300 --out " + fifo,
          "(cat " + fifo + " > " + got + " &);");
  ASSERT_EQ(r.status, 0) << r.err;
  for (int i = 0; i < 100 && fs::file_size(got) < fs::file_size(target); ++i) ::usleep(20000);
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(slurp(got), slurp(target)) << "the reader got the whole calibration";
  r = cli("calibrate --model " + st + " --max-tokens 300 --out ''");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--out is empty"), std::string::npos) << r.err;
  EXPECT_EQ(temporaries(), 0);
}

// info reads a llama2.c checkpoint's header (it said "bad magic (not a .vqkv file)"), and
// tokenize refuses a tokenizer whose vocabulary is not the model's (it printed ids the model
// cannot read).
TEST_F(CliSafety, InfoReadsLlama2cHeadersAndTokenizeChecksTheVocabulary) {
  const std::string st = vq::locate_model_file("stories260K.bin");
  const std::string tok105 = vq::locate_model_file("tok105.bin");
  const std::string tok512 = vq::locate_model_file("tok512.bin");
  if (st.empty() || tok105.empty() || tok512.empty())
    GTEST_SKIP() << "stories260K.bin, tok105.bin or tok512.bin not found";
  CliResult r = cli("info " + st);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("llama2.c checkpoint"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dim 64, hidden 172, 5 layers, 8/4 heads (head_dim 8), vocab 512"),
            std::string::npos)
      << r.out;
  r = cli("tokenize --model " + st + " --tokenizer " + tok105 + " --text-string hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("holds 105 pieces but the model's vocabulary has 512"), std::string::npos)
      << r.err;
  r = cli("tokenize --model " + st + " --tokenizer " + tok512 + " --text-string hi");
  EXPECT_EQ(r.status, 0) << r.err;
  // --seed takes the number written, not a wrapped or saturated one
  for (const char* bad : {"-1", "99999999999999999999999", "''"}) {
    r = cli("generate --model " + st + " --steps 2 --seed " + bad);
    EXPECT_EQ(r.status, 1) << bad;
    EXPECT_NE(r.err.find("is not a decimal integer in [0, 18446744073709551615]"),
              std::string::npos)
        << r.err;
  }
  EXPECT_EQ(cli("generate --model " + st + " --steps 2 --seed 18446744073709551615").status, 0);
}

}  // namespace

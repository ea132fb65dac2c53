// The model subcommands end to end, through the built CLI (skipped when it or the models are
// absent).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "model_test_util.hpp"
#include "veloxquant/npy.hpp"

namespace {

using vqtest::CliRun;
using vqtest::run_cli;

using vqtest::have_cli;

TEST(CliModel, GeneratePerplexityAndEval) {
  if (!have_cli()) GTEST_SKIP() << "the veloxquant CLI is not built";
  VQ_REQUIRE_MODEL_FILE(model, "stories260K.bin");
  VQ_REQUIRE_MODEL_FILE(tok, "tok512.bin");
  VQ_REQUIRE_MODEL_FILE(text, "tinystories-val.txt");
  const std::string mt = " --model '" + model + "' --tokenizer '" + tok + "'";

  CliRun g = run_cli("generate" + mt + " --steps 20");
  ASSERT_EQ(g.status, 0) << g.out;
  EXPECT_EQ(g.out.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u) << g.out;

  vqtest::TempFile json("cli_ppl.json");
  CliRun p =
      run_cli("perplexity" + mt + " --text-string 'Once upon a time' --json '" + json.path() + "'");
  ASSERT_EQ(p.status, 0) << p.out;
  EXPECT_NE(p.out.find("predicted tokens"), std::string::npos) << p.out;
  std::ifstream jf(json.path());
  const auto j = nlohmann::json::parse(jf);
  EXPECT_EQ(j["method"], "full");
  EXPECT_GT(j["predicted_tokens"].get<int64_t>(), 3);
  EXPECT_NEAR(j["perplexity"].get<double>(),
              std::exp(j["nll_sum"].get<double>() / j["predicted_tokens"].get<double>()), 1e-9);

  vqtest::TempFile ej("cli_eval.json");
  CliRun e = run_cli("eval" + mt + " --text '" + text +
                     "' --max-tokens 300 --methods 'full;h2o:budget=64;curdkv:budget=64' --json '" +
                     ej.path() + "'");
  ASSERT_EQ(e.status, 0) << e.out;
  EXPECT_NE(e.out.find("curdkv:budget=64"), std::string::npos) << e.out;
  std::ifstream ef(ej.path());
  const auto ev = nlohmann::json::parse(ef);
  ASSERT_EQ(ev["methods"].size(), 3u);
  EXPECT_EQ(ev["predicted_tokens"], 300);
  EXPECT_EQ(ev["methods"][0]["kl_mean"].get<double>(), 0.0);

  CliRun bad = run_cli("eval" + mt + " --text '" + text + "' --methods 'h2o:budget=0'");
  EXPECT_EQ(bad.status, 1) << bad.out;
  CliRun missing = run_cli("perplexity --model /nonexistent/m.bin --text-string a");
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.out.find("cannot open checkpoint"), std::string::npos) << missing.out;
}

// The same commands on stories260K.gguf (tokenizer read from the GGUF itself) give what they give
// on the .bin; --text-ids takes the ids `tokenize` prints.
TEST(CliModel, GgufModelAndTextIds) {
  if (!have_cli()) GTEST_SKIP() << "the veloxquant CLI is not built";
  VQ_REQUIRE_MODEL_FILE(bin, "stories260K.bin");
  VQ_REQUIRE_MODEL_FILE(gguf, "stories260K.gguf");
  VQ_REQUIRE_MODEL_FILE(text, "tinystories-val.txt");

  CliRun g = run_cli("generate --model '" + gguf + "' --steps 20");
  ASSERT_EQ(g.status, 0) << g.out;
  EXPECT_EQ(g.out.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u) << g.out;
  // --load copy reads the file into memory: the same text; an unknown way is refused, named.
  CliRun gm = run_cli("-q generate --model '" + gguf + "' --steps 20 --load map");
  CliRun gc = run_cli("-q generate --model '" + gguf + "' --steps 20 --load copy");
  ASSERT_EQ(gc.status, 0) << gc.out;
  EXPECT_EQ(gm.status, 0) << gm.out;
  EXPECT_EQ(gc.out, gm.out);
  CliRun gb = run_cli("generate --model '" + gguf + "' --steps 20 --load mmap");
  EXPECT_NE(gb.status, 0) << gb.out;
  EXPECT_NE(gb.out.find("mmap"), std::string::npos) << gb.out;

  const std::string s = " --text-string 'Once upon a time there was a big dog.'";
  vqtest::TempFile jb("cli_ppl_bin.json"), jg("cli_ppl_gguf.json"), ji("cli_ppl_ids.json");
  ASSERT_EQ(run_cli("perplexity --model '" + bin + "'" + s + " --json '" + jb.path() + "'").status,
            0);
  CliRun pg = run_cli("perplexity --model '" + gguf + "'" + s + " --json '" + jg.path() + "'");
  ASSERT_EQ(pg.status, 0) << pg.out;
  const auto rb = nlohmann::json::parse(std::ifstream(jb.path()));
  const auto rg = nlohmann::json::parse(std::ifstream(jg.path()));
  EXPECT_EQ(rb["predicted_tokens"], rg["predicted_tokens"]);
  EXPECT_NEAR(rg["nll_sum"].get<double>(), rb["nll_sum"].get<double>(),
              1e-6 * std::fabs(rb["nll_sum"].get<double>()));

  // tokenize --no-bos -> .npy of int32 -> perplexity --text-ids: the same result.
  CliRun t = run_cli("tokenize --model '" + gguf +
                     "' --no-bos --text-string 'Once upon a time there was a big dog.'");
  ASSERT_EQ(t.status, 0) << t.out;
  std::vector<int32_t> ids;
  std::istringstream is(t.out);
  for (int32_t x; is >> x;) ids.push_back(x);
  ASSERT_FALSE(ids.empty());
  vqtest::TempFile npy("cli_ids.npy");
  vq::NpyArray a;
  a.dtype = vq::NpyDtype::Int32;
  a.shape = {static_cast<int64_t>(ids.size())};
  a.bytes.resize(ids.size() * 4);
  std::memcpy(a.bytes.data(), ids.data(), a.bytes.size());
  vq::write_npy(npy.path(), a);
  CliRun pi = run_cli("perplexity --model '" + gguf + "' --text-ids '" + npy.path() + "' --json '" +
                      ji.path() + "'");
  ASSERT_EQ(pi.status, 0) << pi.out;
  const auto ri = nlohmann::json::parse(std::ifstream(ji.path()));
  EXPECT_EQ(ri["nll_sum"], rg["nll_sum"]);

  vqtest::TempFile ej("cli_eval_gguf.json");
  CliRun e =
      run_cli("eval --model '" + gguf + "' --text '" + text +
              "' --max-tokens 300 --methods 'full;h2o:budget=64' --json '" + ej.path() + "'");
  ASSERT_EQ(e.status, 0) << e.out;
  const auto ev = nlohmann::json::parse(std::ifstream(ej.path()));
  EXPECT_EQ(ev["predicted_tokens"], 300);
  EXPECT_EQ(ev["config"]["architecture"], "llama");
  CliRun ei = run_cli("eval --model '" + gguf + "' --text-ids '" + npy.path() +
                      "' --methods 'full;h2o:budget=8'");
  EXPECT_EQ(ei.status, 0) << ei.out;

  // Bad ids are refused naming the id and the vocabulary.
  vq::NpyArray bad = a;
  const int32_t big = 512;
  std::memcpy(bad.bytes.data(), &big, 4);
  vq::write_npy(npy.path(), bad);
  CliRun pb = run_cli("perplexity --model '" + gguf + "' --text-ids '" + npy.path() + "'");
  EXPECT_EQ(pb.status, 1) << pb.out;
  EXPECT_NE(pb.out.find("id 512 at index 0 is outside the vocabulary [0, 512)"), std::string::npos)
      << pb.out;
}

TEST(CliModel, BenchSpeedGeneratesOnTheGivenModel) {
  if (!have_cli()) GTEST_SKIP() << "the veloxquant CLI is not built";
  VQ_REQUIRE_MODEL_FILE(gguf, "babyllama-char.gguf");
  // The generate rows run the model named by --model (a .gguf here), with kvtc at 4 bits per
  // value of that model's head_dim (16).
  CliRun r = run_cli("bench speed --only generate --min-seconds 0 --model '" + gguf + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("babyllama-char.gguf"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kvtc:bit_budget=64"), std::string::npos) << r.out;
  CliRun missing = run_cli("bench speed --only generate --model /nonexistent/m.gguf");
  EXPECT_EQ(missing.status, 1) << missing.out;
  EXPECT_NE(missing.out.find("/nonexistent/m.gguf"), std::string::npos) << missing.out;
}

}  // namespace

// --threads: the same text and the same NLL for any count; a count outside [1, 1024] is refused
// naming the value, on every engine command.
TEST(CliModel, ThreadsOptionChangesNoResult) {
  if (!have_cli()) GTEST_SKIP() << "the veloxquant CLI is not built";
  VQ_REQUIRE_MODEL_FILE(model, "stories260K.bin");
  VQ_REQUIRE_MODEL_FILE(tok, "tok512.bin");
  const std::string mt = " --model '" + model + "' --tokenizer '" + tok + "'";
  std::string text1;
  double nll1 = 0;
  for (int threads : {1, 2, 3}) {
    const std::string th = " --threads " + std::to_string(threads);
    CliRun g = run_cli("generate" + mt + " --steps 60 --method h2o:budget=32" + th);
    ASSERT_EQ(g.status, 0) << g.out;
    std::string text;  // the output without the timing line
    std::istringstream lines(g.out);
    for (std::string line; std::getline(lines, line);)
      if (line.find("tokens/s") == std::string::npos) text += line + "\n";
    ASSERT_GT(text.size(), 100u) << g.out;
    vqtest::TempFile json("cli_threads_ppl.json");
    CliRun p = run_cli("perplexity" + mt +
                       " --text-string 'Once upon a time, a little dog ran to the park.' --json '" +
                       json.path() + "'" + th);
    ASSERT_EQ(p.status, 0) << p.out;
    std::ifstream jf(json.path());
    const double nll = nlohmann::json::parse(jf)["nll_sum"].get<double>();
    if (threads == 1) {
      text1 = text;
      nll1 = nll;
      continue;
    }
    EXPECT_EQ(text, text1) << threads << " threads";
    EXPECT_EQ(nll, nll1) << threads << " threads";
  }
  for (const char* cmd : {"generate", "perplexity --text-string a", "eval", "calibrate --out x",
                          "dump-kv --out x", "bench speed --only generate"}) {
    for (const char* bad : {"0", "1025"}) {
      CliRun r = run_cli(std::string(cmd) + " --threads " + bad);
      EXPECT_EQ(r.status, 1) << cmd << " --threads " << bad << ": " << r.out;
      EXPECT_NE(r.out.find(std::string("--threads ") + bad + " is outside [1, 1024]"),
                std::string::npos)
          << cmd << ": " << r.out;
    }
  }
}

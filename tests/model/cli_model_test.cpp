// The model subcommands end to end, through the built CLI (skipped when it or the models are
// absent).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "model_test_util.hpp"

namespace {

using vqtest::CliRun;
using vqtest::run_cli;

bool have_cli() {
#ifdef VQ_CLI_PATH
  return std::filesystem::exists(VQ_CLI_PATH);
#else
  return false;
#endif
}

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

}  // namespace

// `veloxquant bench engine --shape tiny` through the built CLI: the JSON's fields and the
// refusal of bad options.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "model_test_util.hpp"

namespace {

using vqtest::CliRun;
using vqtest::run_cli;

TEST(CliBenchEngine, TinyShapeWritesEveryRowWithItsBound) {
  if (!vqtest::have_cli()) GTEST_SKIP() << "the veloxquant CLI is not built";
  vqtest::TempFile json("bench_engine.json");
  const CliRun r = run_cli(
      "bench engine --shape tiny --weights q8_0,q4_k --contexts 32,64 --prefill-tokens 32 "
      "--decode-steps 4 --rounds 3 --threads 2 --methods 'full;h2o:budget=16;q8_0' --json '" +
      json.path() + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("stream copy"), std::string::npos) << r.out;
  std::ifstream f(json.path());
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["benchmark"], "engine");
  EXPECT_EQ(j["rounds"], 3);
  EXPECT_EQ(j["limits"]["threads"], 2);
  EXPECT_GT(j["limits"]["stream_copy_bytes_per_s"].get<double>(), 0);
  // The run's bound is the largest copy: before and after the rows, and the two around each
  // group of decode rounds (2 weight types x 2 contexts).
  const auto probes = j["limits"]["stream_copy_probes_bytes_per_s"].get<std::vector<double>>();
  ASSERT_EQ(probes.size(), 8u) << j["limits"].dump();
  double run_bound = std::max(j["limits"]["stream_copy_start_bytes_per_s"].get<double>(),
                              j["limits"]["stream_copy_end_bytes_per_s"].get<double>());
  for (double p : probes) {
    EXPECT_GT(p, 0);
    run_bound = std::max(run_bound, p);
  }
  EXPECT_EQ(j["limits"]["stream_copy_bytes_per_s"].get<double>(), run_bound);
  // The read reference likewise (the larger of before and after).
  EXPECT_GT(j["limits"]["stream_read_bytes_per_s"].get<double>(), 0);
  EXPECT_EQ(j["limits"]["stream_read_bytes_per_s"].get<double>(),
            std::max(j["limits"]["stream_read_start_bytes_per_s"].get<double>(),
                     j["limits"]["stream_read_end_bytes_per_s"].get<double>()));
  EXPECT_GT(j["limits"]["fma_peak_flops_per_s"].get<double>(), 0);
  ASSERT_EQ(j["models"].size(), 2u);
  EXPECT_GT(j["models"][0]["weight_bytes"].get<double>(),
            j["models"][1]["weight_bytes"].get<double>());
  // Huge pages: whether the kernel took the advice, and how much of each model landed on them
  // (-1 where the system does not say; never more than the process could have gained).
  EXPECT_TRUE(j["limits"]["huge_pages"].is_boolean());
  for (const auto& m : j["models"]) {
    const double h = m["huge_page_bytes"].get<double>();
    EXPECT_GE(h, -1.0) << m.dump();
    EXPECT_TRUE(h == -1.0 || std::fmod(h, 1024.0) == 0.0) << m.dump();
  }
  // Per weight type: one prefill row and 2 contexts x 3 methods of decode rows.
  ASSERT_EQ(j["rows"].size(), 14u) << j.dump(1);
  std::set<std::string> seen;
  double full_kv_64 = 0, h2o_kv_64 = 0;
  int64_t group = -1;  // the decode rows come in groups of three (one weight type and context)
  int64_t decode_rows = 0;
  for (const auto& row : j["rows"]) {
    ASSERT_FALSE(row.contains("error")) << row.dump();
    seen.insert(row["weights"].get<std::string>() + "/" + row["kind"].get<std::string>());
    EXPECT_GT(row["tokens_per_s"].get<double>(), 0) << row.dump();
    EXPECT_GT(row["bound_ratio"].get<double>(), 0) << row.dump();
    EXPECT_TRUE(row["goal_met"].is_boolean());
    if (row["kind"] == "prefill") {
      EXPECT_EQ(row["bound"], "fma_peak");
      EXPECT_NEAR(
          row["bound_ratio"].get<double>(),
          row["flops_per_s"].get<double>() / j["limits"]["fma_peak_flops_per_s"].get<double>(),
          1e-9);
    } else {
      EXPECT_EQ(row["bound"], "stream_copy_bandwidth");
      EXPECT_GT(row["weight_bytes_per_token"].get<double>(), 0);
      EXPECT_GT(row["kv_bytes_per_token"].get<double>(), 0);
      // A decode row's own bound: the larger copy around its group's rounds; the run's bound
      // beside it.
      group = decode_rows++ / 3;
      const double local = row["local_bound_bytes_per_s"].get<double>();
      EXPECT_EQ(local, std::max(probes[static_cast<size_t>(2 * group)],
                                probes[static_cast<size_t>(2 * group + 1)]))
          << row.dump();
      EXPECT_NEAR(row["bound_ratio"].get<double>(),
                  row["tokens_per_s"].get<double>() * row["bytes_per_token"].get<double>() / local,
                  1e-9);
      EXPECT_NEAR(row["run_bound_ratio"].get<double>(),
                  row["tokens_per_s"].get<double>() * row["bytes_per_token"].get<double>() /
                      j["limits"]["stream_copy_bytes_per_s"].get<double>(),
                  1e-9);
      EXPECT_LE(row["run_bound_ratio"].get<double>(), row["bound_ratio"].get<double>());
      EXPECT_EQ(row["goal_met"].get<bool>(), row["bound_ratio"].get<double>() >= 0.7 &&
                                                 (row["method"] == "full" || row["context"] != 64 ||
                                                  row["vs_full"].get<double>() >= 0.9))
          << row.dump();
      EXPECT_NEAR(row["read_ratio"].get<double>(),
                  row["tokens_per_s"].get<double>() * row["bytes_per_token"].get<double>() /
                      j["limits"]["stream_read_bytes_per_s"].get<double>(),
                  1e-9);
      EXPECT_TRUE(row.contains("vs_full")) << row.dump();
      // Three rounds of four steps; the row's rate is its tokens over its time in all of them.
      EXPECT_EQ(row["tokens"], 12) << row.dump();
      const auto rounds = row["round_tokens_per_s"].get<std::vector<double>>();
      ASSERT_EQ(rounds.size(), 3u) << row.dump();
      double seconds = 0;
      for (double tps : rounds) {
        EXPECT_GT(tps, 0);
        seconds += 4 / tps;
      }
      EXPECT_NEAR(row["seconds"].get<double>(), seconds, 1e-9 * seconds) << row.dump();
      EXPECT_NEAR(row["tokens_per_s"].get<double>(), 12 / row["seconds"].get<double>(), 1e-6)
          << row.dump();
      if (row["weights"] == "q8_0" && row["context"] == 64) {
        if (row["method"] == "full") full_kv_64 = row["kv_bytes_per_token"].get<double>();
        if (row["method"] == "h2o:budget=16") h2o_kv_64 = row["kv_bytes_per_token"].get<double>();
      }
    }
  }
  EXPECT_EQ(seen.size(), 4u);
  EXPECT_EQ(decode_rows, 12);
  // The eviction cache holds 16 of the 64+ tokens: it reads fewer K/V bytes than full.
  EXPECT_GT(full_kv_64, 2 * h2o_kv_64);
  EXPECT_GT(h2o_kv_64, 0);
}

TEST(CliBenchEngine, BadOptionsAreRefusedNamingTheValue) {
  if (!vqtest::have_cli()) GTEST_SKIP() << "the veloxquant CLI is not built";
  // Every case would be quick if accepted (tiny shape, one short context), so a refusal is the
  // only way to fail fast with the value in the message.
  const std::string tiny = "--contexts 16 --decode-steps 2 ";
  for (const auto& [args, value] :
       {std::pair<std::string, std::string>{tiny + "--shape tiny --weights q3_z", "q3_z"},
        {tiny + "--shape 7b", "7b"},
        {"--shape tiny --contexts 16 --decode-steps 0", "decode steps 0"},
        {"--shape tiny --decode-steps 2 --contexts 999999999", "context 999999999"},
        {tiny + "--shape tiny --rounds 0", "rounds 0"},
        {tiny + "--shape tiny --rounds 65", "rounds 65"},
        {"--shape tiny --contexts 16 --decode-steps 100 --rounds 41", "100 x rounds 41 = 4100"},
        {tiny + "--shape tiny --threads 0", "--threads 0"}}) {
    const CliRun r = run_cli("bench engine " + args);
    EXPECT_NE(r.status, 0) << args << ": " << r.out;
    EXPECT_NE(r.out.find(value), std::string::npos) << args << ": " << r.out;
  }
}

// bench speed's sizes: refused before any data is generated (a head dim of 0 used to crash).
TEST(CliBenchSpeed, BadSizesAreRefusedNamingTheValue) {
  if (!vqtest::have_cli()) GTEST_SKIP() << "the veloxquant CLI is not built";
  for (const auto& [args, value] :
       {std::pair<std::string, std::string>{"--only eviction --dims 0", "--dims 0"},
        {"--only layer --ns 100000000000", "--ns 100000000000"},
        {"--only eviction --ns 65536 --dims 1024", "67108864 exceeds 8388608"}}) {
    const CliRun r = run_cli("bench speed --evict-methods h2o " + args);
    EXPECT_NE(r.status, 0) << args << ": " << r.out;
    EXPECT_NE(r.out.find(value), std::string::npos) << args << ": " << r.out;
  }
}

}  // namespace

// Evaluations spread their windows over the thread pool (one set of engines per thread) when
// there are at least as many windows as threads, and merge each window's sums in window order:
// every reported number except the timings must be the same for 1, 2 and 3 threads.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/thread_pool.hpp"
#include "eval/fidelity.hpp"
#include "model_test_util.hpp"
#include "test_util.hpp"
#include "veloxquant/threads.hpp"

namespace {

std::vector<int32_t> tokens(int64_t n) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(1 + (i * 7 + i / 5) % 39));
  return t;
}

// Every field but the timings.
nlohmann::json results(const vq::eval::MethodResult& r) {
  nlohmann::json j = vq::eval::to_json(r);
  j.erase("seconds");
  j.erase("tokens_per_s");
  return j;
}

}  // namespace

TEST(EvalThreads, FidelityPerplexityAndPrefillAreTheSameForAnyThreadCount) {
  vqtest::RestoreThreads restore;
  const vq::Model m = vq::Model::random(vqtest::small_config(48), 7, 0.3f);
  const auto windows = vq::eval::make_windows(tokens(47 * 5 + 20), 48);  // 6 windows
  ASSERT_EQ(windows.size(), 6u);
  std::vector<nlohmann::json> fid, ppl, pre;
  for (int threads : {1, 2, 3}) {
    vq::set_thread_count(threads);
    vq::eval::FidelityOptions fo;
    fo.methods = {"full", "h2o:budget=16,n_sink=2", "kvtc:bit_budget=32", "q8_0:block=8"};
    fo.run.prefill = 10;
    int64_t last = 0;
    fo.progress = [&](int64_t done, int64_t total) {
      EXPECT_EQ(done, last + 1);
      EXPECT_EQ(total, 6 * 4);
      last = done;
    };
    const auto rep = vq::eval::run_fidelity(m, windows, fo);
    EXPECT_EQ(last, 6 * 4);
    nlohmann::json f = {{"predicted", rep.predicted_tokens}, {"ref", results(rep.reference)}};
    for (const auto& r : rep.methods) f["methods"].push_back(results(r));
    fid.push_back(f);

    ppl.push_back(results(vq::eval::perplexity(m, windows, vq::CacheConfig::parse("tova:budget=12"),
                                               vq::eval::RunOptions{})));

    vq::eval::PrefillOptions po;
    po.methods = {"snapkv", "knorm", "q4_0:block=8"};
    po.ratios = {0.5, 0.75};
    const auto prep = vq::eval::run_prefill_protocol(m, windows, po);
    nlohmann::json p = {{"predicted", prep.predicted_tokens}, {"ref", results(prep.reference)}};
    for (const auto& r : prep.methods) p["methods"].push_back(results(r));
    pre.push_back(p);
  }
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(fid[i], fid[0]) << "fidelity, " << i + 1 << " threads";
    EXPECT_EQ(ppl[i], ppl[0]) << "perplexity, " << i + 1 << " threads";
    EXPECT_EQ(pre[i], pre[0]) << "prefill protocol, " << i + 1 << " threads";
  }
  EXPECT_GT(fid[0]["methods"][1]["kl_mean"].get<double>(), 0.0);
}

// The options a benchmark passes through to a method: the keys it sweeps itself are refused.
#include <gtest/gtest.h>

#include <string>

#include "eval/bench_kvtc.hpp"
#include "eval/bench_options.hpp"
#include "veloxquant/errors.hpp"

namespace {

TEST(BenchOptions, ExtraOptionsMayNotSetTheSweptKeys) {
  EXPECT_NO_THROW(vq::bench::check_extra_options("b", "", {"budget"}));
  EXPECT_NO_THROW(vq::bench::check_extra_options("b", "alloc=waterfill,budgets=3", {"budget"}));
  try {
    vq::bench::check_extra_options("curdkv bench", "score=mean,n_sink=2", {"budget", "n_sink"});
    FAIL() << "n_sink was accepted";
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("set 'n_sink', which the benchmark sets"),
              std::string::npos)
        << e.what();
  }
  // a composition or a list would run more than the one method the benchmark reports; a
  // number's exponent sign is no composition
  EXPECT_NO_THROW(vq::bench::check_extra_options("b", "heavy_mass=1e+0,sweep=8", {"budget"}));
  for (const char* extra : {"score=mean+q8_0", "score=mean;h2o:budget=4"}) {
    try {
      vq::bench::check_extra_options("curdkv bench", extra, {"budget"});
      ADD_FAILURE() << extra << " was accepted";
    } catch (const vq::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("key=value pairs of the one method"), std::string::npos)
          << e.what();
    }
  }
  vq::bench::KvtcBenchOptions o;
  o.n_seeds = 1;
  o.kvtc_extra = "bit_budget=1";
  EXPECT_THROW(vq::bench::run_kvtc_bench(o), vq::InvalidArgument);
}

}  // namespace

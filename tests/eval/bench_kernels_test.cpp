// bench kernels: which rows it measures and how it names them.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "eval/bench_kernels.hpp"
#include "veloxquant/errors.hpp"

namespace {

TEST(BenchKernels, EachTypeIsMeasuredOnceWhateverItsCase) {
  vq::bench::KernelOptions o;
  o.rows = 16;
  o.cols = 256;
  o.batch = 2;
  o.repeats = 1;
  o.types = {"q8_0", "Q8_0", "f32", "bf16"};
  const auto rows = vq::bench::run_kernel_bench(o);
  ASSERT_EQ(rows.size(), 3u) << "q8_0 and Q8_0 are one kernel; F32 is not added twice";
  EXPECT_EQ(rows[0].type, "Q8_0");
  EXPECT_EQ(rows[1].type, "F32");
  EXPECT_EQ(rows[2].type, "BF16");
  EXPECT_DOUBLE_EQ(rows[1].matvec_vs_f32, 1.0);
  for (const auto& r : rows) {
    EXPECT_TRUE(std::isfinite(r.matvec_us) && r.matvec_us > 0) << r.type;
    EXPECT_TRUE(std::isfinite(r.matmul_vs_f32) && r.matmul_vs_f32 > 0) << r.type;
  }
  o.types = {"q9_0"};
  try {
    vq::bench::run_kernel_bench(o);
    FAIL() << "an unknown type was accepted";
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("type 'q9_0' is not supported"), std::string::npos)
        << e.what();
  }
}

}  // namespace

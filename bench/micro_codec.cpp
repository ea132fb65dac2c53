// Google Benchmark micro-benchmarks of the PCA codecs' pieces (not part of the test run): the
// kvtc block codec end to end, the PCA fit and the un-projection, on bench speed's realistic
// keys (8 heads x 4096 tokens x 128, fp16-exact values).
// Run: ./build/bin/micro_codec --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cstdio>

#include "coding/latent_kernels.hpp"
#include "eval/bench_speed.hpp"
#include "transform/pca_coder.hpp"
#include "veloxquant/codec.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/threads.hpp"

namespace {

constexpr int64_t kH = 8, kS = 4096, kD = 128;

const std::vector<float>& block() {
  static const std::vector<float> x = [] {
    std::vector<float> v;
    for (int64_t h = 0; h < kH; ++h) {
      const auto kv = vq::bench::realistic_kv(kS, kD, 100 + static_cast<uint64_t>(h), true);
      v.insert(v.end(), kv.begin(), kv.end());
    }
    return v;
  }();
  return x;
}

// Bytes processed = the block as fp16 (bench speed's MB/s).
void set_bytes(benchmark::State& state) {
  state.SetBytesProcessed(state.iterations() * kH * kS * kD * 2);
}

void BM_KvtcEncode(benchmark::State& state) {
  auto codec = vq::make_codec("kvtc:bit_budget=" + std::to_string(state.range(0)), kD);
  for (auto _ : state) benchmark::DoNotOptimize(codec->encode(block().data(), kH, kS));
  set_bytes(state);
}

void BM_KvtcDecode(benchmark::State& state) {
  auto codec = vq::make_codec("kvtc:bit_budget=" + std::to_string(state.range(0)), kD);
  const auto blk = codec->encode(block().data(), kH, kS);
  std::vector<float> out(block().size());
  for (auto _ : state) {
    codec->decode(blk, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state);
}

void BM_PcaFit(benchmark::State& state) {
  vq::transform::PcaSettings s;
  s.bit_budget = state.range(0);
  s.bit_choices = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  int64_t k = 0;
  for (auto _ : state) {
    for (int64_t h = 0; h < kH; ++h) {
      auto m = vq::transform::fit_pca_model(block().data() + h * kS * kD, kS, kD, s);
      k = m.kept();
      benchmark::DoNotOptimize(m.basis.data());
    }
  }
  state.counters["kept"] = static_cast<double>(k);
  set_bytes(state);
}

void BM_Unproject(benchmark::State& state) {
  const int64_t k = state.range(0), n = 128;
  std::vector<float> lat(static_cast<size_t>(k * n), 0.5f),
      basis(static_cast<size_t>(k * kD), 0.25f), mean(kD, 1.0f), out(static_cast<size_t>(n * kD));
  for (auto _ : state) {
    vq::coding::unproject_rows(lat.data(), k, n, basis.data(), mean.data(), kD, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFMA/s"] = benchmark::Counter(static_cast<double>(k * n * kD) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_KvtcEncode)->Arg(256)->Arg(512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KvtcDecode)->Arg(256)->Arg(512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PcaFit)->Arg(256)->Arg(512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Unproject)->Arg(32)->Arg(64)->Arg(128)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  vq::set_thread_count(1);  // per core
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}

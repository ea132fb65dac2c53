// Google Benchmark micro-benchmarks of the eviction hot paths (not part of the test run).
// Run: ./build/bench/micro_eviction --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <Eigen/Dense>

#include "eval/bench_speed.hpp"
#include "eviction/leverage.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/npy.hpp"

#include <cstdlib>

namespace {

void run_cache(benchmark::State& state, const std::string& spec_prefix) {
  const int64_t n = state.range(0), D = state.range(1);
  const int64_t extra = 128;
  const auto k = vq::bench::realistic_kv(n + extra, D, 1, true);
  const auto v = vq::bench::realistic_kv(n + extra, D, 2, false);
  const char* sep = spec_prefix.find(':') == std::string::npos ? ":" : ",";
  auto cache = vq::make_cache(
      spec_prefix + (spec_prefix == "full" ? "" : sep + ("budget=" + std::to_string(n))), D);
  cache->update(vq::Tensor::from_fp32(k.data(), 1, 1, n, D),
                vq::Tensor::from_fp32(v.data(), 1, 1, n, D));
  std::vector<vq::Tensor> ks, vs;
  for (int64_t s = 0; s < extra; ++s) {
    ks.push_back(vq::Tensor::from_fp32(k.data() + (n + s) * D, 1, 1, 1, D));
    vs.push_back(vq::Tensor::from_fp32(v.data() + (n + s) * D, 1, 1, 1, D));
  }
  int64_t i = 0;
  for (auto _ : state) {
    cache->update(ks[static_cast<size_t>(i % extra)], vs[static_cast<size_t>(i % extra)]);
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_H2O(benchmark::State& s) {
  run_cache(s, "h2o");
}
void BM_CurdkvFast(benchmark::State& s) {
  run_cache(s, "curdkv");
}

void BM_CurdkvHeavy(benchmark::State& s) {
  run_cache(s, "curdkv:solver=heavy");
}

// The cost `bench speed` reports: every iteration a cache of n tokens (budget n, bench speed's
// key and value seeds) takes 256 fresh tokens one at a time, best of 5 rounds; manual time per
// token.
void stream(benchmark::State& state, const std::string& spec) {
  const int64_t n = state.range(0), D = state.range(1), tokens = state.range(2);
  const auto k = vq::bench::realistic_kv(n + tokens, D, 11 + static_cast<uint64_t>(D), true);
  const auto v = vq::bench::realistic_kv(n + tokens, D, 12 + static_cast<uint64_t>(D), false);
  const std::string full = spec + ":budget=" + std::to_string(n) + ",n_sink=4";
  for (auto _ : state)
    state.SetIterationTime(vq::bench::stream_ns_per_token(full, k, v, n, D, tokens, 0) * 1e-9);
}

void BM_CurdkvStream(benchmark::State& s) {
  stream(s, "curdkv");
}

// The same on real keys and values: every (layer, head) stream of the dump-kv .npy named by
// $VQ_BENCH_KV ([layers, 2, kv_heads, tokens, D]; skipped when unset), n = 512, 256 tokens each;
// manual time = the mean per token over the streams.
void BM_CurdkvRealStream(benchmark::State& state) {
  const char* path = std::getenv("VQ_BENCH_KV");
  if (path == nullptr || *path == 0) {
    state.SkipWithError("set VQ_BENCH_KV to a dump-kv .npy");
    return;
  }
  const int64_t n = 512, tokens = 256;
  std::vector<vq::bench::KvStream> streams;
  int64_t D = 0;
  try {
    const vq::NpyArray a = vq::read_npy(path);
    D = vq::bench::kv_stream_shape(a, "VQ_BENCH_KV")[3];
    streams = vq::bench::kv_streams(a, "VQ_BENCH_KV", n + tokens);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const std::string spec = "curdkv:budget=512,n_sink=4";
  for (auto _ : state) {
    double ns = 0;
    for (const auto& st : streams)
      ns += vq::bench::stream_ns_per_token(spec, st.k, st.v, n, D, tokens, 0);
    state.SetIterationTime(ns / static_cast<double>(streams.size()) * 1e-9);
  }
}

// A KV head serving G = 3 query heads with the true queries (the engine's path on a GQA model;
// `bench speed` drives with the keys as queries): as `stream`, every update with its queries.
void BM_CurdkvGroupedStream(benchmark::State& state) {
  const int64_t n = 512, D = state.range(0), G = 3, tokens = 256, S = n + tokens;
  const auto k = vq::bench::realistic_kv(S, D, 11 + static_cast<uint64_t>(D), true);
  const auto v = vq::bench::realistic_kv(S, D, 12 + static_cast<uint64_t>(D), false);
  std::vector<float> q;  // [G, S, D]
  for (int64_t g = 0; g < G; ++g) {
    const auto qg = vq::bench::realistic_kv(S, D, 40 + static_cast<uint64_t>(g), true);
    q.insert(q.end(), qg.begin(), qg.end());
  }
  for (auto _ : state)
    state.SetIterationTime(
        vq::bench::stream_ns_per_token("curdkv:budget=512,n_sink=4", k, v, n, D, tokens, 0, &q, G) *
        1e-9);
}

void BM_LeverageReference(benchmark::State& state) {
  const int64_t n = state.range(0), D = state.range(1);
  const auto v = vq::bench::realistic_kv(n, D, 3, false);
  std::vector<double> W(v.begin(), v.end()), out(static_cast<size_t>(n));
  for (auto _ : state) {
    vq::eviction::leverage_reference(W.data(), n, D, 16, out.data());
    benchmark::DoNotOptimize(out.data());
  }
}

}  // namespace

BENCHMARK(BM_H2O)->Args({512, 128})->Args({2048, 128});
BENCHMARK(BM_CurdkvFast)->Args({512, 128})->Args({2048, 128});
BENCHMARK(BM_CurdkvHeavy)->Args({512, 64})->Args({512, 128})->Args({4096, 64});
BENCHMARK(BM_CurdkvStream)
    ->Args({512, 64, 256})
    ->Args({512, 128, 256})
    ->UseManualTime()
    ->Iterations(3);
BENCHMARK(BM_CurdkvRealStream)->UseManualTime()->Iterations(3);
BENCHMARK(BM_CurdkvGroupedStream)->Arg(64)->Arg(128)->UseManualTime()->Iterations(3);
BENCHMARK(BM_LeverageReference)->Args({512, 128});
BENCHMARK_MAIN();

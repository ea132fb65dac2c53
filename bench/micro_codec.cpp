// Google Benchmark micro-benchmarks of the PCA codecs' pieces (not part of the test run): the
// kvtc block codec end to end, the PCA fit and the un-projection, on bench speed's realistic
// keys (8 heads x 4096 tokens x 128, fp16-exact values).
// Run: ./build/bin/micro_codec --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cstdio>

#include "coding/latent_kernels.hpp"
#include "eval/bench_speed.hpp"
#include "transform/pca_coder.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/codec.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/tensor.hpp"
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

// One decode step of grouped-query attention on the codes (what Engine::attend_head asks of a
// store): 4 query heads against one KV head of n = 4096 rows, D = 64, scores then weighted
// values, for the cache spec of the argument (0 = full, 1 = kvtc default, 2 = q8_0).
struct GqaCase {
  static constexpr int64_t n = 4096, D = 64, nq = 4;
  static constexpr const char* specs[] = {"full", "kvtc", "q8_0"};
  std::vector<float> k = vq::bench::realistic_kv(n, D, 5, true),
                     v = vq::bench::realistic_kv(n, D, 6, false);
  std::unique_ptr<vq::KVCache> cache;
  std::vector<float> scores = std::vector<float>(static_cast<size_t>(nq * n)),
                     out = std::vector<float>(static_cast<size_t>(nq * D));
  explicit GqaCase(int64_t spec) : cache(vq::make_cache(specs[spec], D)) {
    cache->update(vq::Tensor::from_fp32(k.data(), 1, 1, n, D),
                  vq::Tensor::from_fp32(v.data(), 1, 1, n, D));
  }
  // query set s: the last rows of the keys (set 1 the nq rows before set 0's)
  std::vector<float> queries(int64_t s) const {
    return std::vector<float>(k.end() - (s + 1) * nq * D, k.end() - s * nq * D);
  }
  const vq::store::RowSource& keys() const { return cache->keys(0, 0); }
  const vq::store::RowSource& values() const { return cache->values(0, 0); }
  void uniform_scores() {
    for (float& s : scores) s = 1.0f / static_cast<float>(n);
  }
  void value_sums() {
    std::fill(out.begin(), out.end(), 0.0f);
    values().accumulate_many(0, n, scores.data(), n, nq, out.data());
  }
};

void BM_GqaAttention(benchmark::State& state) {
  GqaCase c(state.range(0));
  const std::vector<float> qs = c.queries(0);
  const int64_t part = state.range(1);  // 0: both, 1: scores only, 2: value sums only
  c.uniform_scores();
  for (auto _ : state) {
    if (part != 2) c.keys().dot_many(0, c.n, qs.data(), c.nq, c.scores.data(), c.n);
    if (part == 0) c.uniform_scores();
    if (part != 1) c.value_sums();
    benchmark::DoNotOptimize(c.out.data());
    benchmark::DoNotOptimize(c.scores.data());
  }
  const char* parts[] = {"", " scores", " values"};
  state.SetLabel(std::string(GqaCase::specs[state.range(0)]) + parts[part]);
}
BENCHMARK(BM_GqaAttention)->ArgsProduct({{0, 1, 2}, {0, 1, 2}})->Unit(benchmark::kMicrosecond);

// The same step with new queries every time, as decode has them (two sets taking turns): what a
// cache prepares per query (the PCA family's projection on its kept components) is paid each
// step here, where BM_GqaAttention's repeated queries find it memoized.
void BM_GqaAttentionNewQueries(benchmark::State& state) {
  GqaCase c(state.range(0));
  const std::vector<float> sets[2] = {c.queries(0), c.queries(1)};
  int64_t it = 0;
  for (auto _ : state) {
    c.keys().dot_many(0, c.n, sets[it++ % 2].data(), c.nq, c.scores.data(), c.n);
    c.uniform_scores();
    c.value_sums();
    benchmark::DoNotOptimize(c.out.data());
  }
  state.SetLabel(GqaCase::specs[state.range(0)]);
}
BENCHMARK(BM_GqaAttentionNewQueries)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);
}  // namespace

int main(int argc, char** argv) {
  vq::set_thread_count(1);  // per core
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}

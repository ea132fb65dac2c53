// `veloxquant bench engine` (see bench_engine.hpp).
#include "eval/bench_engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "core/large_buffer.hpp"
#include "core/rng.hpp"
#include "core/thread_pool.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/threads.hpp"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace vq::bench {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

constexpr int64_t kMaxTokens = 131072;
constexpr int64_t kMaxSteps = 4096, kMaxRounds = 64;
constexpr double kPrefillGoal = 0.5, kDecodeGoal = 0.7, kVsFullGoal = 0.9;

GgmlType weight_type(const std::string& name) {
  if (name == "f32") return GgmlType::F32;
  if (name == "f16") return GgmlType::F16;
  if (name == "bf16") return GgmlType::BF16;
  if (name == "q8_0") return GgmlType::Q8_0;
  if (name == "q4_k") return GgmlType::Q4_K;
  VQ_THROW(InvalidArgument, "weight type '", name, "' is not one of f32, f16, bf16, q8_0, q4_k");
}

ModelConfig shape_config(const std::string& shape, int64_t seq_len) {
  ModelConfig c;
  if (shape == "1b") {
    c.dim = 2048, c.hidden_dim = 8192, c.n_layers = 16, c.n_heads = 32, c.n_kv_heads = 8;
    c.vocab_size = 32000;
  } else if (shape == "tiny") {
    c.dim = 256, c.hidden_dim = 768, c.n_layers = 2, c.n_heads = 8, c.n_kv_heads = 2;
    c.vocab_size = 512;
  } else {
    VQ_THROW(InvalidArgument, "shape '", shape, "' is not one of 1b, tiny");
  }
  c.seq_len = seq_len;
  c.shared_classifier = false;
  c.architecture = "llama";
  return c;
}

void check_count(const char* what, int64_t v, int64_t hi) {
  VQ_CHECK(v >= 1 && v <= hi, InvalidArgument, what, " ", v, " is outside [1, ", hi, "]");
}

uint64_t matrix_bytes(const WeightMatrix& w) {
  return static_cast<uint64_t>(w.rows) * w.row_bytes();
}

// Weight bytes one decode step reads: every layer matrix, the output matrix, the fp32 norms and
// one embedding row (the whole table when it is also the output matrix, counted once).
double decode_weight_bytes(const Model& m) {
  const ModelConfig& c = m.config();
  uint64_t b = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerTensors t = m.tensors(l);
    for (const WeightMatrix* w : {&t.wq, &t.wk, &t.wv, &t.wo, &t.w1, &t.w2, &t.w3})
      b += matrix_bytes(*w);
  }
  const WeightMatrix out = m.output_matrix(), emb = m.embedding_matrix();
  b += matrix_bytes(out);
  if (emb.data != out.data) b += emb.row_bytes();
  b += static_cast<uint64_t>(2 * c.n_layers + 1) * static_cast<uint64_t>(c.dim) * sizeof(float);
  return static_cast<double>(b);
}

// FLOP of a prefill of n tokens at positions 0..n-1 with the last token's logits: 2 per
// multiply-add of every layer matrix, of the causal attention (q.k and the weighted sum of v,
// dim values each per attended position) and of the output matrix for one token. Norms, RoPE,
// softmax and SwiGLU's element-wise work are left out.
double prefill_flops(const ModelConfig& c, int64_t n) {
  const double dim = static_cast<double>(c.dim), kv = static_cast<double>(c.kv_dim());
  const double hid = static_cast<double>(c.hidden_dim), N = static_cast<double>(n);
  const double per_token = 2.0 * (2 * dim * dim + 2 * kv * dim + 3 * hid * dim);
  const double attended = N * (N + 1) / 2;  // positions attended, summed over the tokens
  return static_cast<double>(c.n_layers) * (per_token * N + 4.0 * dim * attended) +
         2.0 * static_cast<double>(c.vocab_size) * dim;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(3 + rng.next_u64() % static_cast<uint64_t>(vocab - 3));
  return t;
}

#if defined(__AVX512F__)
constexpr const char* kFmaKernel = "avx512-fma";
// 12 independent chains of 16-lane FMAs (the widest vectors the build targets: where the core
// executes 512-bit FMAs at full width, as this project's AMD EPYC does, the 256-bit loop
// measures half the peak).
float fma_loop(int64_t iters, float seed) {
  const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
  __m512 a[12];
  for (int k = 0; k < 12; ++k) a[k] = _mm512_set1_ps(seed + static_cast<float>(k));
  for (int64_t i = 0; i < iters; ++i) {  // written out: each chain stays in its own register
    a[0] = _mm512_fmadd_ps(a[0], mul, add);
    a[1] = _mm512_fmadd_ps(a[1], mul, add);
    a[2] = _mm512_fmadd_ps(a[2], mul, add);
    a[3] = _mm512_fmadd_ps(a[3], mul, add);
    a[4] = _mm512_fmadd_ps(a[4], mul, add);
    a[5] = _mm512_fmadd_ps(a[5], mul, add);
    a[6] = _mm512_fmadd_ps(a[6], mul, add);
    a[7] = _mm512_fmadd_ps(a[7], mul, add);
    a[8] = _mm512_fmadd_ps(a[8], mul, add);
    a[9] = _mm512_fmadd_ps(a[9], mul, add);
    a[10] = _mm512_fmadd_ps(a[10], mul, add);
    a[11] = _mm512_fmadd_ps(a[11], mul, add);
  }
  __m512 s = a[0];
  for (int k = 1; k < 12; ++k) s = _mm512_add_ps(s, a[k]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  float r = 0;
  for (float v : out) r += v;
  return r;
}
constexpr double kFlopPerIter = 12 * 16 * 2;
#elif defined(__AVX2__) && defined(__FMA__)
constexpr const char* kFmaKernel = "avx2-fma";
// 12 independent chains of 8-lane FMAs: enough in flight to cover the FMA latency on two ports.
float fma_loop(int64_t iters, float seed) {
  const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
  __m256 a[12];
  for (int k = 0; k < 12; ++k) a[k] = _mm256_set1_ps(seed + static_cast<float>(k));
  for (int64_t i = 0; i < iters; ++i) {  // written out: each chain stays in its own register
    a[0] = _mm256_fmadd_ps(a[0], mul, add);
    a[1] = _mm256_fmadd_ps(a[1], mul, add);
    a[2] = _mm256_fmadd_ps(a[2], mul, add);
    a[3] = _mm256_fmadd_ps(a[3], mul, add);
    a[4] = _mm256_fmadd_ps(a[4], mul, add);
    a[5] = _mm256_fmadd_ps(a[5], mul, add);
    a[6] = _mm256_fmadd_ps(a[6], mul, add);
    a[7] = _mm256_fmadd_ps(a[7], mul, add);
    a[8] = _mm256_fmadd_ps(a[8], mul, add);
    a[9] = _mm256_fmadd_ps(a[9], mul, add);
    a[10] = _mm256_fmadd_ps(a[10], mul, add);
    a[11] = _mm256_fmadd_ps(a[11], mul, add);
  }
  __m256 s = a[0];
  for (int k = 1; k < 12; ++k) s = _mm256_add_ps(s, a[k]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  float r = 0;
  for (float v : out) r += v;
  return r;
}
constexpr double kFlopPerIter = 12 * 8 * 2;
#else
constexpr const char* kFmaKernel = "scalar";
float fma_loop(int64_t iters, float seed) {
  float a[64];
  for (int k = 0; k < 64; ++k) a[k] = seed + static_cast<float>(k);
  for (int64_t i = 0; i < iters; ++i)
    for (float& v : a) v = v * 0.999999f + 1e-7f;
  float r = 0;
  for (float v : a) r += v;
  return r;
}
constexpr double kFlopPerIter = 64 * 2;
#endif

}  // namespace

double measure_copy_bandwidth(int64_t bytes_per_array, double min_seconds) {
  VQ_CHECK(bytes_per_array >= (int64_t{1} << 20), InvalidArgument, "copy array of ",
           bytes_per_array, " bytes is below 1 MiB");
  const auto n = static_cast<size_t>(bytes_per_array);
  // The arrays live in the same kind of memory as the weights (core/large_buffer.hpp), so that the
  // bound is the machine's on the pages decode reads.
  const LargeBuffer a = allocate_large(n), b = allocate_large(n);
  constexpr int64_t kChunk = int64_t{1} << 21;
  const int64_t chunks = (bytes_per_array + kChunk - 1) / kChunk;
  // dst[i] = src[i] (or memset to `fill` when src is null), chunks spread over the pool.
  auto copy = [&](uint8_t* dst, const uint8_t* src, int fill) {
    parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
      const int64_t lo = c0 * kChunk, hi = std::min(bytes_per_array, c1 * kChunk);
      if (src)
        std::memcpy(dst + lo, src + lo, static_cast<size_t>(hi - lo));
      else
        std::memset(dst + lo, fill, static_cast<size_t>(hi - lo));
    });
  };
  // First touch on every thread (untimed), then timed copies back and forth; the best one counts.
  copy(a.data.get(), nullptr, 1);
  copy(b.data.get(), nullptr, 2);
  double best = 1e300, total = 0;
  for (int rep = 0; rep < 3 || total < min_seconds; ++rep) {
    const auto t0 = Clock::now();
    if (rep % 2)
      copy(a.data.get(), b.data.get(), 0);
    else
      copy(b.data.get(), a.data.get(), 0);
    const double s = since(t0);
    best = std::min(best, s);
    total += s;
    if (rep >= 200) break;
  }
  return 2.0 * static_cast<double>(bytes_per_array) / best;
}

double measure_read_bandwidth(int64_t bytes, double min_seconds) {
  VQ_CHECK(bytes >= (int64_t{1} << 20), InvalidArgument, "read array of ", bytes,
           " bytes is below 1 MiB");
  const int64_t words = bytes / 8;
  const LargeBuffer buf = allocate_large(static_cast<size_t>(words) * 8);
  uint64_t* const a = reinterpret_cast<uint64_t*>(buf.data.get());
  // Pieces of 2 MiB, each thread on its own region of them (core/thread_pool.hpp); each piece
  // sums its words in eight independent lanes (the compiler's vector adds), kept in `sink` so
  // that the reads cannot be dropped.
  constexpr int64_t kChunkWords = (int64_t{1} << 21) / 8;
  const int64_t chunks = (words + kChunkWords - 1) / kChunkWords;
  std::vector<uint64_t> sink(static_cast<size_t>(chunks));
  parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {  // first touch, untimed
    for (int64_t i = c0 * kChunkWords; i < std::min(words, c1 * kChunkWords); ++i)
      a[i] = static_cast<uint64_t>(i);
  });
  double best = 1e300, total = 0;
  for (int rep = 0; rep < 3 || total < min_seconds; ++rep) {
    const auto t0 = Clock::now();
    parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const uint64_t* p = a + c * kChunkWords;
        const int64_t n = std::min(words - c * kChunkWords, kChunkWords);
        uint64_t lane[8] = {};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
          for (int l = 0; l < 8; ++l) lane[l] += p[i + l];
        for (; i < n; ++i) lane[0] += p[i];
        uint64_t s = 0;
        for (uint64_t v : lane) s += v;
        sink[static_cast<size_t>(c)] = s;
      }
    });
    const double s = since(t0);
    best = std::min(best, s);
    total += s;
    if (rep >= 200) break;
  }
  uint64_t check = 0;
  for (uint64_t v : sink) check += v;
  // sum of 0 .. words - 1: the reads happened and were summed whole
  VQ_CHECK(check == static_cast<uint64_t>(words) * static_cast<uint64_t>(words - 1) / 2, Error,
           "read bandwidth: the array's sum came out wrong");
  return static_cast<double>(words * 8) / best;
}

double measure_fma_peak(double min_seconds, std::string* kernel) {
  if (kernel) *kernel = kFmaKernel;
  const int64_t pieces = static_cast<int64_t>(thread_count()) * 4;
  int64_t iters = int64_t{1} << 18;
  std::vector<float> sink(static_cast<size_t>(pieces));
  double best = 0;
  for (double total = 0; total < min_seconds;) {
    const auto t0 = Clock::now();
    parallel_for(pieces, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        sink[static_cast<size_t>(p)] = fma_loop(iters, static_cast<float>(p));
    });
    const double s = since(t0);
    total += s;
    best = std::max(best, kFlopPerIter * static_cast<double>(iters * pieces) / s);
    if (s < 0.05) iters *= 2;  // lengthen until a run is long enough to time well
  }
  volatile float keep = sink[0];  // the results are used
  (void)keep;
  return best;
}

EngineBenchResult run_engine_bench(const EngineBenchOptions& opt) {
  VQ_CHECK(!opt.weights.empty(), InvalidArgument, "no weight types given");
  VQ_CHECK(!opt.methods.empty(), InvalidArgument, "no methods given");
  VQ_CHECK(!opt.contexts.empty(), InvalidArgument, "no contexts given");
  std::vector<GgmlType> types;
  for (const auto& w : opt.weights) types.push_back(weight_type(w));
  for (int64_t c : opt.contexts) check_count("context", c, kMaxTokens);
  check_count("prefill tokens", opt.prefill_tokens, kMaxTokens);
  check_count("decode steps", opt.decode_steps, kMaxSteps);
  check_count("rounds", opt.rounds, kMaxRounds);
  VQ_CHECK(opt.decode_steps * opt.rounds <= kMaxSteps, InvalidArgument, "decode steps ",
           opt.decode_steps, " x rounds ", opt.rounds, " = ", opt.decode_steps * opt.rounds,
           " is above ", kMaxSteps);
  const int64_t max_ctx = *std::max_element(opt.contexts.begin(), opt.contexts.end());
  const ModelConfig config = shape_config(
      opt.shape, std::max(max_ctx + 1 + opt.decode_steps * opt.rounds, opt.prefill_tokens));
  auto say = [&](const std::string& what) {
    if (opt.progress) opt.progress(what);
  };

  EngineBenchResult res;
  EngineLimits& lim = res.limits;
  lim.threads = thread_count();
  // Whether the kernel takes the huge-page advice here (the probes' and the weights' arrays are
  // allocated the same way): one array of one huge page, asked for and released.
  lim.huge_pages = allocate_large(kHugePageBytes).huge_pages_advised;
  say("stream copy");
  lim.copy_bytes = opt.shape == "tiny" ? double(int64_t{1} << 24) : double(int64_t{1} << 28);
  const double copy_seconds = opt.shape == "tiny" ? 0.05 : 1.0;
  lim.bandwidth_start = measure_copy_bandwidth(static_cast<int64_t>(lim.copy_bytes), copy_seconds);
  say("stream read");
  lim.read_start = measure_read_bandwidth(static_cast<int64_t>(lim.copy_bytes), copy_seconds);
  say("fma peak");
  lim.fma_flops = measure_fma_peak(opt.shape == "tiny" ? 0.05 : 1.0, &lim.fma_kernel);

  for (size_t wi = 0; wi < types.size(); ++wi) {
    const std::string& wname = opt.weights[wi];
    say("building the " + opt.shape + " model in " + wname);
    const int64_t huge_before = resident_huge_bytes();
    const auto tb = Clock::now();
    const Model model = Model::random_typed(config, types[wi], opt.seed);
    EngineModelInfo info;
    info.weights = wname;
    info.build_seconds = since(tb);
    const int64_t huge_after = resident_huge_bytes();
    if (huge_before >= 0 && huge_after >= 0)
      info.huge_page_bytes = static_cast<double>(std::max<int64_t>(0, huge_after - huge_before));
    info.weight_bytes = static_cast<double>(model.weight_bytes());
    for (const auto& name : model.weights()->names())
      info.params += static_cast<double>(model.weights()->get(name).numel());
    res.models.push_back(info);
    const double wbytes = decode_weight_bytes(model);

    // Prefill.
    {
      say(wname + ": prefill " + std::to_string(opt.prefill_tokens));
      Engine e(model, std::string("full"));
      const auto toks = random_tokens(opt.prefill_tokens, config.vocab_size, opt.seed + 1);
      const auto t0 = Clock::now();
      e.prefill(toks, false);
      EngineRow r;
      r.weights = wname;
      r.kind = "prefill";
      r.method = "full";
      r.context = r.tokens = opt.prefill_tokens;
      r.seconds = since(t0);
      r.tokens_per_s = static_cast<double>(r.tokens) / r.seconds;
      r.flops = prefill_flops(config, opt.prefill_tokens);
      r.bound_ratio = r.flops / r.seconds / lim.fma_flops;
      r.goal = "FLOP/s >= 0.5 fma peak";
      r.goal_met = r.bound_ratio >= kPrefillGoal;
      res.rows.push_back(r);
    }

    // Decode after a prefill of each context: every method's engine is prefilled, then the
    // methods take turns in rounds of decode_steps steps each (the order reversed in every other
    // round), so a method's time is spread over the same stretch of the run as full's.
    for (int64_t ctx : opt.contexts) {
      struct Live {
        std::unique_ptr<Engine> engine;  // null once a step has failed (the row holds the error)
        int32_t next = 0;
        double kv0 = 0;
        size_t row = 0;  // index into res.rows
      };
      std::vector<Live> live;
      for (const auto& spec : opt.methods) {
        say(wname + ": prefill " + std::to_string(ctx) + " for " + spec);
        EngineRow r;
        r.weights = wname;
        r.kind = "decode";
        r.method = spec;
        r.context = ctx;
        r.weight_bytes = wbytes;
        r.goal = "bytes/s >= 0.7 bandwidth";
        if (spec != "full" && ctx == max_ctx) r.goal += ", >= 0.9x full";
        try {
          Live l;
          l.engine = std::make_unique<Engine>(model, spec);
          const auto toks = random_tokens(ctx, config.vocab_size, opt.seed + 2);
          l.next = argmax(l.engine->prefill(toks, false).data(), config.vocab_size);
          l.row = res.rows.size();
          live.push_back(std::move(l));
        } catch (const std::exception& ex) {
          r.error = ex.what();
        }
        res.rows.push_back(r);
      }
      // Runs `steps` greedy steps of a live engine; returns their seconds, or a negative value
      // when a step threw (the error is the row's, the engine is dropped).
      const auto advance = [&](Live& l, int64_t steps) {
        try {
          const auto t0 = Clock::now();
          for (int64_t s = 0; s < steps; ++s)
            l.next = argmax(l.engine->step(l.next), config.vocab_size);
          return since(t0);
        } catch (const std::exception& ex) {
          res.rows[l.row].error = ex.what();
          l.engine.reset();
          return -1.0;
        }
      };
      // One untimed step per engine first: on this project's machine the first step after a long
      // prefill ran 5x slower than the next ones (194 vs 39 ms at context 4096, Q8_0), and what
      // makes it slow is not the step: a 1 GB array read right after the prefill took 344 ms,
      // then 39 ms. Timing it would charge whichever method comes first in round 1.
      say(wname + ": decode at " + std::to_string(ctx) + ", one untimed step per method");
      for (Live& l : live)
        if (advance(l, 1) >= 0) l.kv0 = l.engine->stats().content_bytes;
      // The memory's speed right before and right after these rounds: the rows' local bound.
      say(wname + ": stream copy before the decode rounds at " + std::to_string(ctx));
      const double bw_before =
          measure_copy_bandwidth(static_cast<int64_t>(lim.copy_bytes), copy_seconds);
      for (int64_t round = 0; round < opt.rounds; ++round) {
        say(wname + ": decode at " + std::to_string(ctx) + ", round " + std::to_string(round + 1) +
            " of " + std::to_string(opt.rounds));
        for (size_t k = 0; k < live.size(); ++k) {
          Live& l = live[round % 2 == 0 ? k : live.size() - 1 - k];
          if (!l.engine) continue;
          const double sec = advance(l, opt.decode_steps);
          if (sec < 0) continue;
          EngineRow& r = res.rows[l.row];
          r.seconds += sec;
          r.tokens += opt.decode_steps;
          r.round_tokens_per_s.push_back(static_cast<double>(opt.decode_steps) / sec);
        }
      }
      say(wname + ": stream copy after the decode rounds at " + std::to_string(ctx));
      const double bw_after =
          measure_copy_bandwidth(static_cast<int64_t>(lim.copy_bytes), copy_seconds);
      lim.bandwidth_probes.push_back(bw_before);
      lim.bandwidth_probes.push_back(bw_after);
      for (Live& l : live) res.rows[l.row].local_bandwidth = std::max(bw_before, bw_after);
      double full_tps = 0;
      for (Live& l : live) {
        if (!l.engine) continue;
        EngineRow& r = res.rows[l.row];
        r.kv_bytes = (l.kv0 + l.engine->stats().content_bytes) / 2;
        r.tokens_per_s = static_cast<double>(r.tokens) / r.seconds;
        if (r.method == "full" && full_tps == 0) full_tps = r.tokens_per_s;
      }
      for (Live& l : live)
        if (l.engine)
          res.rows[l.row].vs_full = full_tps > 0 ? res.rows[l.row].tokens_per_s / full_tps : 0;
    }
  }
  say("stream copy again");
  lim.bandwidth_end = measure_copy_bandwidth(static_cast<int64_t>(lim.copy_bytes), copy_seconds);
  lim.bandwidth = std::max(lim.bandwidth_start, lim.bandwidth_end);
  for (double b : lim.bandwidth_probes) lim.bandwidth = std::max(lim.bandwidth, b);
  say("stream read again");
  lim.read_end = measure_read_bandwidth(static_cast<int64_t>(lim.copy_bytes), copy_seconds);
  lim.read_bandwidth = std::max(lim.read_start, lim.read_end);
  for (EngineRow& r : res.rows) {
    if (r.kind != "decode" || !r.error.empty()) continue;
    r.bound_ratio = r.tokens_per_s * (r.weight_bytes + r.kv_bytes) / r.local_bandwidth;
    r.run_bound_ratio = r.tokens_per_s * (r.weight_bytes + r.kv_bytes) / lim.bandwidth;
    r.read_ratio = r.tokens_per_s * (r.weight_bytes + r.kv_bytes) / lim.read_bandwidth;
    r.goal_met = r.bound_ratio >= kDecodeGoal;
    if (r.method != "full" && r.context == max_ctx)
      r.goal_met = r.goal_met && r.vs_full > 0 && r.vs_full >= kVsFullGoal;
  }
  return res;
}

}  // namespace vq::bench

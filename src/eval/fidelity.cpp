#include "eval/fidelity.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <vector>

#include "core/thread_pool.hpp"
#include "eviction/one_shot.hpp"
#include "eviction/one_shot_spec.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/threads.hpp"

namespace vq::eval {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// log_softmax of n float logits, in double.
void log_softmax(const float* logits, int64_t n, double* out) {
  double mx = logits[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(logits[i]) - lse;
}

// Accumulators of one method over all windows.
struct Acc {
  double stored_sum = 0;  // the same in storage form (K/V rows as a file would hold them)
  double mem_sum = 0;
  int64_t mem_n = 0;
  double mem_final_sum = 0;
  int64_t windows = 0;
  double seconds = 0;
  int64_t processed = 0;
  Acc& operator+=(const Acc& o) {
    stored_sum += o.stored_sum;
    mem_sum += o.mem_sum;
    mem_n += o.mem_n;
    mem_final_sum += o.mem_final_sum;
    windows += o.windows;
    seconds += o.seconds;
    processed += o.processed;
    return *this;
  }
};

// What one engine made of one window. Windows may run on several threads; their parts are
// merged into the totals in window order afterwards, so every total is the same sum whatever
// the thread count.
struct Part {
  Acc acc;
  double nll = 0, kl = 0, agree = 0, kl_max = 0;
  int64_t predicted = 0;
  // A method's logits against the reference's log-probabilities ref_p and top token.
  void score(const double* ref_p, int32_t ref_top, const float* lg, int64_t V, int32_t target,
             std::vector<double>& lp) {
    log_softmax(lg, V, lp.data());
    double k = 0;
    for (int64_t v = 0; v < V; ++v)
      k += std::exp(ref_p[v]) * (ref_p[v] - lp[static_cast<size_t>(v)]);
    k = std::max(k, 0.0);  // rounding can leave -1e-17 for equal inputs
    kl += k;
    kl_max = std::max(kl_max, k);
    agree += argmax(lg, V) == ref_top ? 1.0 : 0.0;
    nll -= lp[static_cast<size_t>(target)];
    predicted += 1;
  }
};

// Running totals of one method over the windows merged so far.
struct Totals {
  Acc acc;
  double kl = 0, agree = 0;
  void merge(MethodResult& r, const Part& p) {
    acc += p.acc;
    kl += p.kl;
    agree += p.agree;
    r.kl_max = std::max(r.kl_max, p.kl_max);
    r.nll_sum += p.nll;
    r.predicted += p.predicted;
  }
  void finish_scores(MethodResult& r) const {
    r.kl_mean = r.predicted > 0 ? kl / static_cast<double>(r.predicted) : 0;
    r.top1_agreement = r.predicted > 0 ? agree / static_cast<double>(r.predicted) : 1;
  }
};

// Thread-safe (done, total) progress calls.
class Progress {
 public:
  Progress(const std::function<void(int64_t, int64_t)>& f, int64_t total) : f_(f), total_(total) {}
  void tick() {
    if (!f_) return;
    std::lock_guard<std::mutex> lk(m_);
    f_(++done_, total_);
  }

 private:
  const std::function<void(int64_t, int64_t)>& f_;
  int64_t total_, done_ = 0;
  std::mutex m_;
};

// Runs body(set, w) for every window w in [0, n). With at least as many windows as threads, the
// windows are cut into thread_count() contiguous ranges that run in parallel, each on its own set
// of engines (an engine's own loops then run inline on that thread); otherwise every window runs
// on the calling thread with one set, and the engines' loops use the threads. Every set is built
// by make() on the calling thread before any window runs (a bad spec fails first). A window's
// results do not depend on which set ran it: each run resets its engine.
template <typename Set, typename Make, typename Body>
void for_windows(int64_t n, Make&& make, Body&& body) {
  const int T = thread_count();
  const int64_t P = T > 1 && n >= T ? T : 1;
  std::vector<Set> sets;
  sets.reserve(static_cast<size_t>(P));
  for (int64_t k = 0; k < P; ++k) sets.push_back(make());
  if (P == 1) {
    for (int64_t w = 0; w < n; ++w) body(sets[0], w);
    return;
  }
  parallel_for(P, 1, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t w = k * n / P; w < (k + 1) * n / P; ++w) body(sets[static_cast<size_t>(k)], w);
  });
}

// Feed window tokens 0..n-2 (the ones whose logits predict a token) through a reset engine.
// on_logits(p, logits) is called for every position p in [0, n-2].
template <typename F>
void run_window(Engine& e, const std::vector<int32_t>& w, int64_t prefill, Acc& acc,
                F&& on_logits) {
  e.reset();
  const int64_t n = static_cast<int64_t>(w.size()) - 1;  // positions that predict something
  if (n <= 0) return;
  const ModelConfig& c = e.model().config();
  const int64_t V = c.vocab_size;
  const double per_pos = static_cast<double>(c.n_layers * c.n_kv_heads);
  double last = 0;
  auto sample = [&](int64_t p) {
    const CacheStats st = e.stats();
    last = st.kept_bytes / (per_pos * static_cast<double>(p + 1));
    acc.stored_sum += st.stored_bytes / (per_pos * static_cast<double>(p + 1));
    acc.mem_sum += last;
    acc.mem_n += 1;
  };
  const int64_t P = std::min(prefill, n);
  if (P > 0) {
    const std::vector<int32_t> chunk(w.begin(), w.begin() + P);
    const double t0 = now_s();
    const std::vector<float>& lg = e.prefill(chunk, true);
    acc.seconds += now_s() - t0;
    sample(P - 1);
    for (int64_t p = 0; p < P; ++p) on_logits(p, lg.data() + p * V);
  }
  for (int64_t p = P; p < n; ++p) {
    const double t0 = now_s();
    const float* lg = e.step(w[static_cast<size_t>(p)]);
    acc.seconds += now_s() - t0;
    sample(p);
    on_logits(p, lg);
  }
  acc.processed += n;
  acc.mem_final_sum += last;
  acc.windows += 1;
}

void finish(MethodResult& r, const Acc& acc, const ModelConfig& c) {
  r.perplexity = r.predicted > 0 ? std::exp(r.nll_sum / static_cast<double>(r.predicted)) : 0;
  r.fp16_bytes_per_token = 2.0 * 2.0 * static_cast<double>(c.head_dim());
  r.bytes_per_token = acc.mem_n > 0 ? acc.mem_sum / static_cast<double>(acc.mem_n) : 0;
  r.stored_bytes_per_token = acc.mem_n > 0 ? acc.stored_sum / static_cast<double>(acc.mem_n) : 0;
  r.bytes_per_token_final =
      acc.windows > 0 ? acc.mem_final_sum / static_cast<double>(acc.windows) : 0;
  r.compression_ratio = r.bytes_per_token > 0 ? r.fp16_bytes_per_token / r.bytes_per_token : 1;
  r.compression_ratio_final =
      r.bytes_per_token_final > 0 ? r.fp16_bytes_per_token / r.bytes_per_token_final : 1;
  r.tokens_processed = acc.processed;
  r.seconds = acc.seconds;
  r.tokens_per_s = acc.seconds > 0 ? static_cast<double>(acc.processed) / acc.seconds : 0;
}

void check_windows(const Model& model, const std::vector<std::vector<int32_t>>& windows) {
  const ModelConfig& c = model.config();
  for (size_t i = 0; i < windows.size(); ++i)
    VQ_CHECK(static_cast<int64_t>(windows[i].size()) <= c.seq_len, InvalidArgument, "window ", i,
             " holds ", windows[i].size(), " tokens, more than the context length ", c.seq_len);
}

}  // namespace

std::vector<std::vector<int32_t>> make_windows(const std::vector<int32_t>& text, int64_t context,
                                               int64_t max_tokens, int32_t bos) {
  VQ_CHECK(context >= 2, InvalidArgument, "make_windows: context = ", context,
           " must be >= 2 (BOS plus one token)");
  VQ_CHECK(max_tokens >= 0, InvalidArgument, "make_windows: max_tokens = ", max_tokens,
           " must be >= 0");
  int64_t n = static_cast<int64_t>(text.size());
  if (max_tokens > 0) n = std::min(n, max_tokens);
  const int64_t per = context - 1;
  std::vector<std::vector<int32_t>> out;
  for (int64_t start = 0; start < n; start += per) {
    const int64_t end = std::min(n, start + per);
    std::vector<int32_t> w;
    w.reserve(static_cast<size_t>(end - start + 1));
    w.push_back(bos);
    w.insert(w.end(), text.begin() + start, text.begin() + end);
    out.push_back(std::move(w));
  }
  return out;
}

std::vector<std::vector<int32_t>> eval_windows(const std::vector<int32_t>& text, int64_t context,
                                               int64_t skip_tokens, int64_t max_tokens, int32_t bos,
                                               const std::string& source) {
  VQ_CHECK(skip_tokens >= 0 && skip_tokens < static_cast<int64_t>(text.size()), InvalidArgument,
           "skip_tokens = ", skip_tokens, " leaves nothing: the text '", source, "' holds ",
           text.size(), " tokens");
  const std::vector<int32_t> rest(text.begin() + skip_tokens, text.end());
  auto windows = make_windows(rest, context, max_tokens, bos);
  VQ_CHECK(!windows.empty(), InvalidArgument, "the text '", source, "' holds no tokens");
  return windows;
}

nlohmann::json to_json(const MethodResult& r) {
  return {{"spec", r.spec},
          {"predicted_tokens", r.predicted},
          {"nll_sum", r.nll_sum},
          {"perplexity", r.perplexity},
          {"ppl_delta", r.ppl_delta},
          {"ppl_delta_rel", r.ppl_delta_rel},
          {"kl_mean", r.kl_mean},
          {"kl_max", r.kl_max},
          {"top1_agreement", r.top1_agreement},
          {"bytes_per_token", r.bytes_per_token},
          {"stored_bytes_per_token", r.stored_bytes_per_token},
          {"bytes_per_token_final", r.bytes_per_token_final},
          {"fp16_bytes_per_token", r.fp16_bytes_per_token},
          {"compression_ratio", r.compression_ratio},
          {"compression_ratio_final", r.compression_ratio_final},
          {"tokens_processed", r.tokens_processed},
          {"ratio", r.evict_ratio},
          {"kept_per_head", r.kept_per_head},
          {"seconds", r.seconds},
          {"tokens_per_s", r.tokens_per_s}};
}

FidelityReport run_fidelity(const Model& model, const std::vector<std::vector<int32_t>>& windows,
                            const FidelityOptions& opt) {
  check_windows(model, windows);
  VQ_CHECK(opt.run.prefill >= 0, InvalidArgument, "run_fidelity: prefill = ", opt.run.prefill,
           " must be >= 0");
  const ModelConfig& c = model.config();
  const int64_t V = c.vocab_size;
  const CacheConfig full_cfg = CacheConfig::parse("full");

  // Parse everything before any work; methods equal to `full` reuse the reference run.
  std::vector<CacheConfig> cfgs;
  std::vector<int> is_full;
  for (const auto& s : opt.methods) {
    cfgs.push_back(CacheConfig::parse(s));
    is_full.push_back(cfgs.back() == full_cfg);
  }
  std::vector<size_t> engine_of(cfgs.size(), 0);
  size_t n_engines = 0;
  for (size_t i = 0; i < cfgs.size(); ++i)
    if (!is_full[i]) engine_of[i] = n_engines++;
  struct Set {
    Engine ref;
    std::vector<Engine> engines;
  };
  auto make = [&] {
    Set set{Engine(model, full_cfg, opt.run.engine()), {}};
    for (size_t i = 0; i < cfgs.size(); ++i)
      if (!is_full[i]) set.engines.emplace_back(model, cfgs[i], opt.run.engine());
    return set;
  };

  FidelityReport rep;
  rep.context = c.seq_len;
  rep.n_windows = static_cast<int64_t>(windows.size());
  rep.reference.spec = full_cfg.to_string();
  std::vector<MethodResult> res(cfgs.size());
  for (size_t i = 0; i < cfgs.size(); ++i) res[i].spec = cfgs[i].to_string();

  const auto n_win = static_cast<int64_t>(windows.size());
  Progress progress(opt.progress, n_win * static_cast<int64_t>(1 + n_engines));
  // parts[w][0]: the reference on window w; parts[w][1 + i]: method i (unused when it is full)
  std::vector<std::vector<Part>> parts(windows.size(), std::vector<Part>(1 + cfgs.size()));
  for_windows<Set>(n_win, make, [&](Set& set, int64_t wi) {
    const auto& w = windows[static_cast<size_t>(wi)];
    const int64_t n = static_cast<int64_t>(w.size()) - 1;
    if (n <= 0) return;
    std::vector<Part>& part = parts[static_cast<size_t>(wi)];
    std::vector<double> ref_lp(static_cast<size_t>(n * V)), lp(static_cast<size_t>(V));
    std::vector<int32_t> ref_top(static_cast<size_t>(n));
    run_window(set.ref, w, opt.run.prefill, part[0].acc, [&](int64_t p, const float* lg) {
      double* out = ref_lp.data() + p * V;
      log_softmax(lg, V, out);
      ref_top[static_cast<size_t>(p)] = argmax(lg, V);
      part[0].nll -= out[w[static_cast<size_t>(p + 1)]];
      part[0].predicted += 1;
    });
    progress.tick();
    for (size_t i = 0; i < cfgs.size(); ++i) {
      if (is_full[i]) continue;
      Part& mp = part[1 + i];
      run_window(set.engines[engine_of[i]], w, opt.run.prefill, mp.acc,
                 [&](int64_t p, const float* lg) {
                   mp.score(ref_lp.data() + p * V, ref_top[static_cast<size_t>(p)], lg, V,
                            w[static_cast<size_t>(p + 1)], lp);
                 });
      progress.tick();
    }
  });
  Totals ref_tot;
  std::vector<Totals> tot(cfgs.size());
  for (size_t wi = 0; wi < windows.size(); ++wi) {
    const int64_t n = static_cast<int64_t>(windows[wi].size()) - 1;
    if (n <= 0) continue;
    rep.predicted_tokens += n;
    ref_tot.merge(rep.reference, parts[wi][0]);
    for (size_t i = 0; i < cfgs.size(); ++i)
      if (!is_full[i]) tot[i].merge(res[i], parts[wi][1 + i]);
  }
  for (size_t i = 0; i < cfgs.size(); ++i) tot[i].finish_scores(res[i]);
  const Acc& ref_acc = ref_tot.acc;
  std::vector<Acc> accs;
  for (const Totals& t : tot) accs.push_back(t.acc);
  finish(rep.reference, ref_acc, c);
  for (size_t i = 0; i < cfgs.size(); ++i) {
    if (is_full[i]) {
      res[i] = rep.reference;
      continue;
    }
    finish(res[i], accs[i], c);
  }
  for (auto& r : res) {
    r.ppl_delta = r.perplexity - rep.reference.perplexity;
    r.ppl_delta_rel = rep.reference.perplexity > 0 ? r.ppl_delta / rep.reference.perplexity : 0;
  }
  rep.methods = std::move(res);
  return rep;
}

std::vector<std::string> default_methods(int64_t context, int64_t head_dim) {
  auto registered = [](const char* id) {
    for (const auto& m : methods())
      if (m.id == id) return true;
    return false;
  };
  std::vector<std::string> out = {"full"};
  // Eviction at 1/8, 1/4 and 1/2 of the context: H2O as the spec defines it (no recent window)
  // and with half its budget protecting the most recent tokens; CurDKV with the spec's cumulative
  // score and with the per-update mean.
  for (int64_t div : {8, 4, 2}) {
    const int64_t budget = std::max<int64_t>(context / div, 8);  // above the 4 sinks
    if (registered("h2o")) {
      out.push_back(detail::cat("h2o:budget=", budget));
      out.push_back(detail::cat("h2o:budget=", budget, ",recent=", budget / 2));
    }
    if (registered("curdkv")) {
      out.push_back(detail::cat("curdkv:budget=", budget));
      out.push_back(detail::cat("curdkv:budget=", budget, ",score=mean"));
    }
  }
  for (const char* id : {"kvtc", "uniform"})
    if (registered(id))
      for (int64_t bits : {2, 4}) out.push_back(detail::cat(id, ":bit_budget=", bits * head_dim));
  // llama.cpp's 32-value blocks lie inside one head; smaller heads get the 16- or 8-value blocks
  for (const char* id : {"q8_0", "q4_0"}) {
    if (!registered(id)) continue;
    if (head_dim % 32 == 0)
      out.emplace_back(id);
    else if (head_dim % 8 == 0)
      out.push_back(detail::cat(id, ":block=", head_dim % 16 == 0 ? 16 : 8));
  }
  return out;
}

MethodResult perplexity(const Model& model, const std::vector<std::vector<int32_t>>& windows,
                        const CacheConfig& method, const RunOptions& run,
                        const std::function<void(int64_t, int64_t)>& progress) {
  check_windows(model, windows);
  VQ_CHECK(run.prefill >= 0, InvalidArgument, "perplexity: prefill = ", run.prefill,
           " must be >= 0");
  const int64_t V = model.config().vocab_size;
  MethodResult r;
  r.spec = method.to_string();
  const auto n_win = static_cast<int64_t>(windows.size());
  Progress ticks(progress, n_win);
  std::vector<Part> parts(windows.size());
  for_windows<Engine>(
      n_win, [&] { return Engine(model, method, run.engine()); },
      [&](Engine& e, int64_t wi) {
        const auto& w = windows[static_cast<size_t>(wi)];
        Part& part = parts[static_cast<size_t>(wi)];
        std::vector<double> lp(static_cast<size_t>(V));
        run_window(e, w, run.prefill, part.acc, [&](int64_t p, const float* lg) {
          log_softmax(lg, V, lp.data());
          part.nll -= lp[static_cast<size_t>(w[static_cast<size_t>(p + 1)])];
          part.predicted += 1;
        });
        ticks.tick();
      });
  Totals tot;
  for (const Part& part : parts) tot.merge(r, part);
  finish(r, tot.acc, model.config());
  return r;
}

namespace {

// Prefill w[0, N), then step w[N .. N + M - 1]; on_logits(i, logits) for continuation step i
// (predicting w[N + i + 1]). Memory is sampled after each step.
template <typename F>
void run_prefill_window(Engine& e, const std::vector<int32_t>& w, int64_t N, int64_t M, Acc& acc,
                        F&& on_logits) {
  e.reset();
  const ModelConfig& c = e.model().config();
  const double per_pos = static_cast<double>(c.n_layers * c.n_kv_heads);
  const std::vector<int32_t> ctx(w.begin(), w.begin() + N);
  double t0 = now_s();
  e.prefill(ctx, false);
  acc.seconds += now_s() - t0;
  double last = 0;
  for (int64_t i = 0; i < M; ++i) {
    const int64_t p = N + i;
    t0 = now_s();
    const float* lg = e.step(w[static_cast<size_t>(p)]);
    acc.seconds += now_s() - t0;
    const CacheStats st = e.stats();
    last = st.kept_bytes / (per_pos * static_cast<double>(p + 1));
    acc.stored_sum += st.stored_bytes / (per_pos * static_cast<double>(p + 1));
    acc.mem_sum += last;
    acc.mem_n += 1;
    on_logits(i, lg);
  }
  acc.processed += N + M;
  acc.mem_final_sum += last;
  acc.windows += 1;
}

}  // namespace

PrefillReport run_prefill_protocol(const Model& model,
                                   const std::vector<std::vector<int32_t>>& windows,
                                   const PrefillOptions& opt) {
  check_windows(model, windows);
  const ModelConfig& c = model.config();
  const int64_t V = c.vocab_size;
  const int64_t N = opt.context > 0 ? opt.context : c.seq_len * 3 / 4;
  VQ_CHECK(opt.context >= 0, InvalidArgument, "prefill protocol: context = ", opt.context,
           " must be >= 0 (0 = 3/4 of the model's context)");
  VQ_CHECK(opt.continuation >= 0, InvalidArgument,
           "prefill protocol: continuation = ", opt.continuation,
           " must be >= 0 (0 = the rest of each window)");
  VQ_CHECK(N >= 2, InvalidArgument, "prefill protocol: context = ", N,
           " must be >= 2 (BOS and one token)");
  VQ_CHECK(N + 2 <= c.seq_len, InvalidArgument, "prefill protocol: context = ", N,
           " leaves no continuation: the model's context length is ", c.seq_len,
           ", so the context must be <= ", c.seq_len - 2,
           " (one continuation token fed and the token after it)");
  VQ_CHECK(N + opt.continuation + 1 <= c.seq_len, InvalidArgument, "prefill protocol: context ", N,
           " + continuation ", opt.continuation, " + 1 = ", N + opt.continuation + 1,
           " exceeds the model's context length ", c.seq_len);
  VQ_CHECK(!opt.ratios.empty(), InvalidArgument, "prefill protocol: no ratio given");
  for (double r : opt.ratios) eviction::one_shot_keep(N, r);  // refuses r outside [0, 1)

  // Parse everything first, and build the engines before any window runs: a bad spec costs
  // nothing.
  const CacheConfig full_cfg = CacheConfig::parse("full");
  struct Run {
    std::string spec;
    double ratio;
    CacheConfig codec;             // a transform method alone (no eviction)
    Engine::CacheFactory factory;  // otherwise the one-shot cache of each layer
  };
  std::vector<Run> runs;
  const int64_t D = c.head_dim(), L = c.n_layers;
  for (const auto& s : opt.methods) {
    // A transform method (a codec alone) evicts nothing: one run, every token kept in its form.
    if (eviction::is_codec_alone(s)) {
      const CacheConfig cfg = CacheConfig::parse(s);
      runs.push_back(Run{cfg.to_string(), 0.0, cfg, {}});
      continue;
    }
    const eviction::OneShotSpec spec = eviction::parse_one_shot(s);
    for (double r : opt.ratios) {
      Engine::CacheFactory f = [spec, r, D, L, seed = opt.seed, keep = opt.keep_policy](int64_t l) {
        return eviction::make_one_shot_cache(spec, r, D, l, L, layer_seed(seed, l), keep);
      };
      runs.push_back(Run{spec.to_string(), r, CacheConfig{}, std::move(f)});
    }
  }
  struct Set {
    Engine ref;
    std::vector<Engine> runs;
  };
  auto make = [&] {
    Set set{Engine(model, full_cfg, EngineOptions{opt.seed, false}), {}};
    for (const Run& r : runs)
      set.runs.push_back(r.factory ? Engine(model, r.factory, EngineOptions{opt.seed, false})
                                   : Engine(model, r.codec, EngineOptions{opt.seed, false}));
    return set;
  };

  PrefillReport rep;
  rep.context = N;
  std::vector<const std::vector<int32_t>*> used;
  int64_t longest = 0;
  for (const auto& w : windows) {
    const auto W = static_cast<int64_t>(w.size());
    longest = std::max(longest, W);
    const int64_t need = N + std::max<int64_t>(opt.continuation, 1) + 1;
    if (W >= need)
      used.push_back(&w);
    else
      rep.skipped_windows += 1;
  }
  VQ_CHECK(!used.empty(), InvalidArgument, "prefill protocol: context = ", N, " + continuation ",
           std::max<int64_t>(opt.continuation, 1), " + 1 needs windows of at least ",
           N + std::max<int64_t>(opt.continuation, 1) + 1, " tokens; the longest holds ", longest);
  rep.n_windows = static_cast<int64_t>(used.size());
  rep.reference.spec = full_cfg.to_string();
  rep.reference.evict_ratio = 0;
  rep.reference.kept_per_head = N;
  std::vector<MethodResult> res(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    res[i].spec = runs[i].spec;
    res[i].evict_ratio = runs[i].ratio;
    res[i].kept_per_head = eviction::one_shot_keep(N, runs[i].ratio);
  }
  const auto n_win = static_cast<int64_t>(used.size());
  Progress progress(opt.progress, n_win * static_cast<int64_t>(1 + runs.size()));
  auto steps = [&](const std::vector<int32_t>& w) {
    return opt.continuation > 0 ? opt.continuation : static_cast<int64_t>(w.size()) - N - 1;
  };
  // parts[w][0]: the reference on window w; parts[w][1 + k]: run k
  std::vector<std::vector<Part>> parts(used.size(), std::vector<Part>(1 + runs.size()));
  for_windows<Set>(n_win, make, [&](Set& set, int64_t wi) {
    const auto& w = *used[static_cast<size_t>(wi)];
    const int64_t M = steps(w);
    std::vector<Part>& part = parts[static_cast<size_t>(wi)];
    std::vector<double> ref_lp(static_cast<size_t>(M * V)), lp(static_cast<size_t>(V));
    std::vector<int32_t> ref_top(static_cast<size_t>(M));
    run_prefill_window(set.ref, w, N, M, part[0].acc, [&](int64_t i, const float* lg) {
      double* out = ref_lp.data() + i * V;
      log_softmax(lg, V, out);
      ref_top[static_cast<size_t>(i)] = argmax(lg, V);
      part[0].nll -= out[w[static_cast<size_t>(N + i + 1)]];
      part[0].predicted += 1;
    });
    progress.tick();
    for (size_t k = 0; k < runs.size(); ++k) {
      Part& mp = part[1 + k];
      run_prefill_window(set.runs[k], w, N, M, mp.acc, [&](int64_t i, const float* lg) {
        mp.score(ref_lp.data() + i * V, ref_top[static_cast<size_t>(i)], lg, V,
                 w[static_cast<size_t>(N + i + 1)], lp);
      });
      progress.tick();
    }
  });
  Totals ref_tot;
  std::vector<Totals> tot(runs.size());
  for (size_t wi = 0; wi < used.size(); ++wi) {
    const int64_t M = steps(*used[wi]);
    rep.continuation = std::max(rep.continuation, M);
    rep.predicted_tokens += M;
    ref_tot.merge(rep.reference, parts[wi][0]);
    for (size_t k = 0; k < runs.size(); ++k) tot[k].merge(res[k], parts[wi][1 + k]);
  }
  const Acc& ref_acc = ref_tot.acc;
  finish(rep.reference, ref_acc, c);
  for (size_t k = 0; k < runs.size(); ++k) {
    tot[k].finish_scores(res[k]);
    finish(res[k], tot[k].acc, c);
    res[k].ppl_delta = res[k].perplexity - rep.reference.perplexity;
    res[k].ppl_delta_rel =
        rep.reference.perplexity > 0 ? res[k].ppl_delta / rep.reference.perplexity : 0;
  }
  rep.methods = std::move(res);
  return rep;
}

std::vector<std::string> default_one_shot_methods() {
  std::vector<std::string> out;
  const std::vector<std::string> wanted = {"streaming_llm",
                                           "snapkv:window=64,kernel=5,pool=avg",
                                           "tova",
                                           "knorm",
                                           "h2o",
                                           "qfilters",
                                           "expected_attention",
                                           "curdkv_paper",
                                           "curdkv",
                                           "keyformer",
                                           "morphkv",
                                           "kvzip",
                                           "nestedkv",
                                           "adakv/snapkv:window=64,kernel=5,pool=avg"};
  for (const auto& s : wanted) {
    const std::string rest = s.rfind("adakv/", 0) == 0 ? s.substr(6) : s;
    const std::string id = rest.substr(0, rest.find(':'));
    for (const auto& m : methods())
      if (m.id == id && m.make_scorer) out.push_back(s);
  }
  return out;
}

}  // namespace vq::eval

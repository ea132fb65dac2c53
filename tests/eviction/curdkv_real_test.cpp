// CurDKV's fast leverage against the two-SVD reference on real keys, values and queries: the
// per-token stream of every layer and KV head of babyllama-char (head_dim 16) over TinyStories
// text, recorded once from a full-cache run and replayed step by step into curdkv caches that
// differ only in `solver`. Skipped when the model files are absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "eviction/eviction_cache.hpp"
#include "model/model_test_util.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/model.hpp"

namespace {

// Keeps every token (so the run is the full-cache run) and records what each step handed it.
class RecordingCache final : public vq::Fp32RowsCache {
 public:
  RecordingCache(int64_t D, int64_t layer, int64_t n_layers)
      : Fp32RowsCache(vq::CacheConfig::parse("full"), vq::CacheContext{D, layer, n_layers, 0, {}}) {
  }

  struct Step {
    vq::Tensor k, v, q;
  };
  std::vector<Step> steps;

 protected:
  void do_update(const vq::Tensor& k, const vq::Tensor& v, const vq::Tensor* q) override {
    steps.push_back(Step{k, v, q ? *q : vq::Tensor()});
    const int64_t D = head_dim();
    for (int64_t h = 0; h < k.H(); ++h)
      for (int64_t s = 0; s < k.S(); ++s) {
        rows(0, h, 0).insert(rows(0, h, 0).end(), k.row(0, h, s), k.row(0, h, s) + D);
        rows(0, h, 1).insert(rows(0, h, 1).end(), v.row(0, h, s), v.row(0, h, s) + D);
        pos(0, h).push_back(offset() + s);
      }
    publish();
  }
};

struct RealStream {
  int64_t n_layers = 0, head_dim = 0;
  std::vector<std::vector<RecordingCache::Step>> layers;  // [layer][step]
};

// One window of `n` text tokens through a model, one token per step; null when files are absent.
// Cached per model for the test binary's life.
const RealStream* real_stream(int64_t n, const std::string& model_file = "babyllama-char.bin",
                              const std::string& tokenizer = "tok105.bin",
                              const std::string& text = "tinystories-val.txt") {
  static std::map<std::string, std::unique_ptr<RealStream>> streams;
  const std::string key = model_file + "/" + std::to_string(n);
  if (auto it = streams.find(key); it != streams.end()) return it->second.get();
  auto& cached = streams[key];
  const std::string model_path = vq::locate_model_file(model_file);
  const std::string tok_path = vq::locate_model_file(tokenizer);
  const std::string text_path = vq::locate_model_file(text);
  if (model_path.empty() || tok_path.empty() || text_path.empty()) return nullptr;
  const vq::Model model = vq::Model::load(model_path);
  const vq::Tokenizer tok = vq::Tokenizer::load(tok_path, model.config().vocab_size);
  std::ifstream f(text_path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<int32_t> ids = tok.encode(ss.str().substr(0, 8000), true, false);
  ids.resize(static_cast<size_t>(std::min<int64_t>(n, static_cast<int64_t>(ids.size()))));
  const int64_t L = model.config().n_layers, D = model.config().head_dim();
  std::vector<RecordingCache*> rec(static_cast<size_t>(L));
  vq::Engine engine(model, [&](int64_t l) -> std::unique_ptr<vq::KVCache> {
    auto c = std::make_unique<RecordingCache>(D, l, L);
    rec[static_cast<size_t>(l)] = c.get();
    return c;
  });
  for (int32_t t : ids) engine.step(t);
  auto out = std::make_unique<RealStream>();
  out->n_layers = L;
  out->head_dim = D;
  for (auto* r : rec) out->layers.push_back(r->steps);
  cached = std::move(out);
  return cached.get();
}

std::vector<int64_t> kept(const vq::KVCache& c, int64_t h) {
  const auto r = c.fetch();
  return {r.positions.begin() + h * r.n_kept, r.positions.begin() + (h + 1) * r.n_kept};
}

struct Agreement {
  int64_t steps_compared = 0, steps_identical = 0;  // (layer, head, step) triples
  int64_t final_slots = 0, final_common = 0;
  double worst_score_gap = 0;  // largest |fast - ref| / max(ref) over kept slots, per step
  double overlap() const {     // share of the oracle's final slots the tested cache holds too
    return static_cast<double>(final_common) / static_cast<double>(final_slots);
  }
};

// Replays the recorded stream into two curdkv caches that differ only in solver.
Agreement compare(const RealStream& rs, const std::string& common, const std::string& solver) {
  Agreement a;
  for (int64_t l = 0; l < rs.n_layers; ++l) {
    auto test = vq::make_cache(vq::CacheConfig::parse(common + ",solver=" + solver), rs.head_dim, l,
                               rs.n_layers);
    auto ref = vq::make_cache(vq::CacheConfig::parse(common + ",solver=reference"), rs.head_dim, l,
                              rs.n_layers);
    for (const auto& st : rs.layers[static_cast<size_t>(l)]) {
      test->update(st.k, st.v, &st.q);
      ref->update(st.k, st.v, &st.q);
      for (int64_t h = 0; h < test->kv_heads(); ++h) {
        ++a.steps_compared;
        a.steps_identical += kept(*test, h) == kept(*ref, h) ? 1 : 0;
        const auto& se = dynamic_cast<const vq::eviction::EvictionCache&>(*test).head_state(0, h);
        const auto& sr = dynamic_cast<const vq::eviction::EvictionCache&>(*ref).head_state(0, h);
        if (se.n != sr.n ||
            !std::equal(se.kv.positions(), se.kv.positions() + se.n, sr.kv.positions()))
          continue;  // compare scores only slot for slot
        double top = 0, gap = 0;
        for (int64_t i = 0; i < sr.n; ++i)
          top = std::max(top, std::fabs(sr.score[static_cast<size_t>(i)]));
        for (int64_t i = 0; i < sr.n; ++i)
          gap = std::max(
              gap, std::fabs(se.score[static_cast<size_t>(i)] - sr.score[static_cast<size_t>(i)]));
        if (top > 0) a.worst_score_gap = std::max(a.worst_score_gap, gap / top);
      }
    }
    for (int64_t h = 0; h < test->kv_heads(); ++h) {
      const auto x = kept(*test, h), y = kept(*ref, h);
      std::vector<int64_t> both;
      std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(both));
      a.final_slots += static_cast<int64_t>(y.size());
      a.final_common += static_cast<int64_t>(both.size());
    }
  }
  return a;
}

constexpr int64_t kTokens = 200;

TEST(CurdkvReal, FastEqualsReferenceWhenEveryDirectionIsKept) {
  const RealStream* rs = real_stream(kTokens);
  if (!rs) GTEST_SKIP() << "babyllama-char.bin / tok105.bin / tinystories-val.txt not found";
  ASSERT_EQ(rs->head_dim, 16);
  // rank_cap 16 = head_dim: the leverage is the closed form ||w_i||^2 / ||W||_F^2 in every
  // solver, so the decisions must be identical at every step of every layer and head. Scores
  // are summed per-step leverages; fast and reference round differently, so they agree to a
  // relative 1e-6 of the largest score, not bit for bit.
  for (const char* solver : {"fast", "heavy"}) {
    const Agreement a = compare(*rs, "curdkv:budget=48,n_sink=4,rank_cap=16", solver);
    std::printf(
        "[ curdkv real ] closed form, %s: %lld/%lld steps identical, worst score gap %.3g\n",
        solver, static_cast<long long>(a.steps_identical), static_cast<long long>(a.steps_compared),
        a.worst_score_gap);
    EXPECT_EQ(a.steps_identical, a.steps_compared) << solver;
    EXPECT_LT(a.worst_score_gap, 1e-6) << solver;
  }
}

TEST(CurdkvReal, ExactSolverEqualsReferenceWhenTheRankCapTruncates) {
  const RealStream* rs = real_stream(kTokens);
  if (!rs) GTEST_SKIP() << "babyllama-char.bin / tok105.bin / tinystories-val.txt not found";
  // rank_cap 4 < head_dim 16: only the top-4 directions count. The converged Gram solver must
  // reproduce the oracle's decisions exactly and its scores to 1e-8 relative.
  const Agreement a = compare(*rs, "curdkv:budget=48,n_sink=4,rank_cap=4", "exact");
  std::printf("[ curdkv real ] exact, rank_cap 4: %lld/%lld steps identical, worst gap %.3g\n",
              static_cast<long long>(a.steps_identical), static_cast<long long>(a.steps_compared),
              a.worst_score_gap);
  EXPECT_EQ(a.steps_identical, a.steps_compared);
  EXPECT_LT(a.worst_score_gap, 1e-8);
}

TEST(CurdkvReal, FastSolverTracksTheReferenceWhenTheRankCapTruncates) {
  const RealStream* rs = real_stream(kTokens);
  if (!rs) GTEST_SKIP() << "babyllama-char.bin / tok105.bin / tinystories-val.txt not found";
  // The fast solver runs one warm-started subspace iteration per token (refresh=1) or per
  // `refresh` tokens (the default, 16; in between the basis is held) in fp32, so near-ties can
  // resolve differently. What it must keep: nearly the same final token sets (>= 95% of slots).
  // refresh=16 holds the basis between iterations: faster, but the top directions of
  // diag(a) V move with every token's attention, and the kept sets drift further (0.80 measured);
  // its floor here guards that trade-off against regressions, not a quality claim.
  for (const char* refresh : {"1", "16"}) {
    const Agreement a = compare(
        *rs, std::string("curdkv:budget=48,n_sink=4,rank_cap=4,refresh=") + refresh, "fast");
    const double overlap = a.overlap();
    std::printf(
        "[ curdkv real ] fast, rank_cap 4, refresh %s: %lld/%lld steps identical, final overlap "
        "%.4f\n",
        refresh, static_cast<long long>(a.steps_identical),
        static_cast<long long>(a.steps_compared), overlap);
    EXPECT_GE(overlap, std::string(refresh) == "1" ? 0.95 : 0.75) << "refresh=" << refresh;
  }
}

}  // namespace

namespace {

TEST(CurdkvReal, HeavySolverTracksTheReferenceWhenTheRankCapTruncates) {
  const RealStream* rs = real_stream(kTokens);
  if (!rs) GTEST_SKIP() << "babyllama-char.bin / tok105.bin / tinystories-val.txt not found";
  // solver=heavy iterates the subspace on the rows holding 99% of each step's weighted energy
  // (at most 16 by default since session 27, 32 before) and keeps the light rows' projections
  // from when they were last projected. The bar: >= 95% of the oracle's final kept slots,
  // for the default and for the former default. The looser settings show how the agreement
  // degrades as the heavy set shrinks (their floors guard against regressions).
  // refresh=4 holds the basis for three tokens in four: it trades agreement for speed (0.85 in
  // session 13; docs/curdkv.md), and its floor guards that trade.
  const std::pair<const char*, double> cases[] = {{"", 0.95},
                                                  {",heavy_rows=32", 0.95},
                                                  {",heavy_rows=8", 0.9},
                                                  {",heavy_mass=0.9,sweep=0", 0.9},
                                                  {",refresh=4", 0.8}};
  for (const auto& [extra, floor] : cases) {
    const Agreement a =
        compare(*rs, std::string("curdkv:budget=48,n_sink=4,rank_cap=4") + extra, "heavy");
    const double overlap = a.overlap();
    std::printf(
        "[ curdkv real ] heavy, rank_cap 4%s: %lld/%lld steps identical, final overlap "
        "%.4f\n",
        extra, static_cast<long long>(a.steps_identical), static_cast<long long>(a.steps_compared),
        overlap);
    EXPECT_GE(overlap, floor) << extra;
  }
}

}  // namespace

namespace {

// prose1k: head_dim 64 and three query heads per KV head, where rank_cap 16 truncates as in the
// speed benchmark's configuration (rank_cap 16 of D = 64). Both tracked solvers must keep >= 95% of
// the oracle's final slots; solver=heavy with every row heavy and swept each token does the same
// arithmetic as solver=fast up to the orthonormalization's rounding.
TEST(CurdkvReal, TrackedSolversFollowTheReferenceOnProse1k) {
  const RealStream* rs = real_stream(400, "prose1k.bin", "tokp2048.bin", "prose-val.txt");
  if (!rs) GTEST_SKIP() << "prose1k.bin / tokp2048.bin / prose-val.txt not found";
  ASSERT_EQ(rs->head_dim, 64);
  for (const char* solver :
       {"fast", "heavy", "heavy,heavy_rows=32", "heavy,heavy_mass=1,heavy_rows=1000,sweep=1"}) {
    const Agreement a = compare(*rs, "curdkv:budget=128,n_sink=4,rank_cap=16", solver);
    const double overlap = a.overlap();
    std::printf(
        "[ curdkv real ] prose1k, rank_cap 16, solver=%s: %lld/%lld steps identical, final "
        "overlap %.4f\n",
        solver, static_cast<long long>(a.steps_identical), static_cast<long long>(a.steps_compared),
        overlap);
    EXPECT_GE(overlap, 0.95) << solver;
  }
}

}  // namespace

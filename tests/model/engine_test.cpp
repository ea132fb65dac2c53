#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model_test_util.hpp"
#include "reference_forward.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/registry.hpp"

namespace {

// A keep-everything cache written for the tests: optionally asks for pre-RoPE keys, and records
// the queries it is given.
class TestFullCache final : public vq::KVCache {
 public:
  TestFullCache(int64_t D, int64_t layer, int64_t n_layers, bool pre_rope)
      : KVCache(vq::CacheConfig::parse("full"), vq::CacheContext{D, layer, n_layers, 0, {}}),
        pre_rope_(pre_rope) {}
  bool wants_pre_rope_keys() const override { return pre_rope_; }
  // fp32 rows: a prefill chunk attends its own rows exactly as stored
  void round_as_stored(int, int64_t, float*, int64_t, int64_t) override {}

  std::vector<std::vector<float>> K, V;     // per head, [n, D]
  std::vector<std::vector<int64_t>> P;      // per head
  std::vector<std::vector<float>> queries;  // one [Hq * D] row per token (batch 0)
  std::vector<vq::store::Fp32Rows> ks, vs;

  const vq::store::RowSource& keys(int64_t b, int64_t h) const override {
    return ks[static_cast<size_t>(b * kv_heads() + h)];
  }
  const vq::store::RowSource& values(int64_t b, int64_t h) const override {
    return vs[static_cast<size_t>(b * kv_heads() + h)];
  }
  const int64_t* positions(int64_t b, int64_t h) const override {
    return P[static_cast<size_t>(b * kv_heads() + h)].data();
  }
  int64_t kept(int64_t b, int64_t h) const override {
    return P.empty() ? 0 : static_cast<int64_t>(P[static_cast<size_t>(b * kv_heads() + h)].size());
  }
  vq::CacheStats stats() const override { return {}; }

 protected:
  void on_shape_known(int64_t B, int64_t H) override {
    K.resize(static_cast<size_t>(B * H));
    V.resize(K.size());
    P.resize(K.size());
  }
  void do_update(const vq::Tensor& k, const vq::Tensor& v, const vq::Tensor* q) override {
    const int64_t D = head_dim();
    for (int64_t b = 0; b < k.B(); ++b)
      for (int64_t h = 0; h < k.H(); ++h) {
        const size_t i = static_cast<size_t>(b * k.H() + h);
        for (int64_t s = 0; s < k.S(); ++s) {
          K[i].insert(K[i].end(), k.row(b, h, s), k.row(b, h, s) + D);
          V[i].insert(V[i].end(), v.row(b, h, s), v.row(b, h, s) + D);
          P[i].push_back(offset() + s);
        }
      }
    ks.clear();
    vs.clear();
    for (size_t i = 0; i < P.size(); ++i) {
      ks.emplace_back(K[i].data(), static_cast<int64_t>(P[i].size()), head_dim());
      vs.emplace_back(V[i].data(), static_cast<int64_t>(P[i].size()), head_dim());
    }
    if (q)
      for (int64_t s = 0; s < q->S(); ++s) {
        std::vector<float> row;
        for (int64_t h = 0; h < q->H(); ++h)
          row.insert(row.end(), q->row(0, h, s), q->row(0, h, s) + D);
        queries.push_back(std::move(row));
      }
  }

 private:
  bool pre_rope_;
};

std::vector<std::vector<float>> step_all(vq::Engine& e, const std::vector<int32_t>& tokens) {
  std::vector<std::vector<float>> out;
  const int64_t V = e.model().config().vocab_size;
  for (int32_t t : tokens) {
    const float* lg = e.step(t);
    out.emplace_back(lg, lg + V);
  }
  return out;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float rel,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  const float tol = rel * std::max(1.0f, max_abs(b));
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << what << ", index " << i;
}

vq::Model small_model(uint64_t seed = 3, bool shared = true) {
  return vq::Model::random(vqtest::small_config(48, shared), seed, 0.3f);
}

TEST(Engine, FullCacheMatchesTheReferenceForward) {
  for (bool shared : {true, false}) {
    const vq::Model m = small_model(3, shared);
    const auto tokens = vqtest::some_tokens(48, m.config().vocab_size);
    for (const bool fp16 : {true, false}) {
      vq::Engine e(m, fp16 ? "full" : "full+f32");
      vq::testing::ReferenceForward ref(m, fp16);
      // The engine's attention sums in vector lanes with fused multiply-adds, the reference in
      // order; with an fp16 cache a last-bit difference can move a later layer's stored key or
      // value by one fp16 step (2^-11 relative), so that case is held to one fp16 step.
      const float tol = fp16 ? 0x1p-11f : 2e-5f;
      for (size_t p = 0; p < tokens.size(); ++p) {
        const float* lg = e.step(tokens[p]);
        const std::vector<float> got(lg, lg + m.config().vocab_size);
        expect_close(got, ref.forward(tokens[p], static_cast<int64_t>(p)), tol,
                     std::string(fp16 ? "fp16" : "f32") + " cache, position " + std::to_string(p));
      }
    }
  }
}

TEST(Engine, CacheReceivesTheLayersRopedQueriesAndKeys) {
  const vq::Model m = small_model();
  const auto tokens = vqtest::some_tokens(20, m.config().vocab_size);
  std::vector<TestFullCache*> layer_caches;
  vq::Engine e(m, [&](int64_t l) {
    auto c = std::make_unique<TestFullCache>(m.config().head_dim(), l, m.config().n_layers, false);
    layer_caches.push_back(c.get());
    return c;
  });
  ASSERT_EQ(layer_caches.size(), 2u);
  vq::testing::ReferenceForward ref(m);
  for (size_t p = 0; p < tokens.size(); ++p) {
    std::vector<float> q_ref;
    ref.forward(tokens[p], static_cast<int64_t>(p), &q_ref);
    e.step(tokens[p]);
    const auto& rec = layer_caches[0]->queries;
    ASSERT_EQ(rec.size(), p + 1);
    ASSERT_EQ(rec.back().size(), static_cast<size_t>(m.config().dim));  // [n_heads * D]
    expect_close(rec.back(), q_ref, 1e-5f, "layer-0 queries at " + std::to_string(p));
  }
  EXPECT_EQ(layer_caches[1]->P[1].back(), 19);  // KV head 1 holds every position
  EXPECT_EQ(layer_caches[0]->K.size(), 2u);     // n_kv_heads heads
}

TEST(Engine, PreRopeCachesGetUnrotatedKeysAndTheSameLogits) {
  const vq::Model m = small_model();
  const auto tokens = vqtest::some_tokens(30, m.config().vocab_size);
  std::vector<TestFullCache*> pre, post;
  auto factory = [&](bool pre_rope, std::vector<TestFullCache*>& keep) {
    return [&m, pre_rope, &keep](int64_t l) {
      auto c =
          std::make_unique<TestFullCache>(m.config().head_dim(), l, m.config().n_layers, pre_rope);
      keep.push_back(c.get());
      return c;
    };
  };
  vq::Engine a(m, factory(true, pre)), b(m, factory(false, post));
  const auto la = step_all(a, tokens), lb = step_all(b, tokens);
  for (size_t p = 0; p < tokens.size(); ++p) EXPECT_EQ(la[p], lb[p]) << "position " << p;
  // Position 0 is not rotated; later keys differ from the rotated ones the other cache holds.
  const int64_t D = m.config().head_dim();
  EXPECT_EQ(std::memcmp(pre[0]->K[0].data(), post[0]->K[0].data(), sizeof(float) * D), 0);
  EXPECT_NE(
      std::memcmp(pre[0]->K[0].data() + 7 * D, post[0]->K[0].data() + 7 * D, sizeof(float) * D), 0);
  // The prefill path rotates fetched pre-RoPE keys too.
  a.reset();
  b.reset();
  a.prefill(std::vector<int32_t>(tokens.begin(), tokens.begin() + 10));
  b.prefill(std::vector<int32_t>(tokens.begin(), tokens.begin() + 10));
  const auto& pa = a.prefill(std::vector<int32_t>(tokens.begin() + 10, tokens.end()));
  const std::vector<float> pa_copy = pa;
  const auto& pb = b.prefill(std::vector<int32_t>(tokens.begin() + 10, tokens.end()));
  // Old rows: rotated then an Eigen product (pre) vs the store's dot kernel (post): two
  // summation orders of the same fp32 values.
  expect_close(pa_copy, pb, 4e-6f, "pre-RoPE prefill");
}

TEST(Engine, PrefillMatchesStepByStep) {
  const vq::Model m = small_model();
  const int64_t V = m.config().vocab_size;
  const auto tokens = vqtest::some_tokens(48, V);
  vq::Engine e(m, "full");
  const auto steps = step_all(e, tokens);
  // Steps attend with the store's vector kernels, a prefill chunk's own rows with Eigen: as in
  // FullCacheMatchesTheReferenceForward, last-bit differences may move an fp16-stored row by
  // one fp16 step, so the comparison allows one fp16 step (2^-11) of the largest logit.
  const float tol = 0x1p-11f;
  e.reset();
  const std::vector<float> whole = e.prefill(tokens);
  ASSERT_EQ(whole.size(), tokens.size() * static_cast<size_t>(V));
  for (size_t p = 0; p < tokens.size(); ++p)
    expect_close(std::vector<float>(whole.begin() + static_cast<std::ptrdiff_t>(p * V),
                                    whole.begin() + static_cast<std::ptrdiff_t>((p + 1) * V)),
                 steps[p], tol, "one-chunk prefill at " + std::to_string(p));
  // Two chunks, then decode: the second chunk attends over the cached first one.
  e.reset();
  e.prefill(std::vector<int32_t>(tokens.begin(), tokens.begin() + 17));
  const std::vector<float> second =
      e.prefill(std::vector<int32_t>(tokens.begin() + 17, tokens.begin() + 40), false);
  expect_close(second, steps[39], tol, "last row of the second chunk");
  EXPECT_EQ(e.position(), 40);
  for (size_t p = 40; p < tokens.size(); ++p) {
    const float* lg = e.step(tokens[p]);
    expect_close(std::vector<float>(lg, lg + V), steps[p], tol, "decode after prefill");
  }
}

// A chunk longer than the rows its queries attend at a time (2048): the blocks' rows must match
// stepping through the same tokens, on both sides of every block boundary, with old rows cached.
TEST(Engine, LongPrefillChunkAttendsInRowBlocks) {
  const int64_t first = 50, chunk = 2 * 2048 + 200;
  const vq::Model m = vq::Model::random(vqtest::small_config(first + chunk + 2), 5, 0.3f);
  const int64_t V = m.config().vocab_size;
  const auto tokens = vqtest::some_tokens(first + chunk + 2, V, 7);
  vq::Engine e(m, "full");
  const auto steps = step_all(e, tokens);
  e.reset();
  e.prefill(std::vector<int32_t>(tokens.begin(), tokens.begin() + first));
  const std::vector<float> whole =
      e.prefill(std::vector<int32_t>(tokens.begin() + first, tokens.begin() + first + chunk));
  ASSERT_EQ(whole.size(), static_cast<size_t>(chunk * V));
  for (const int64_t r :
       {int64_t{0}, int64_t{2047}, int64_t{2048}, int64_t{4095}, int64_t{4096}, chunk - 1}) {
    const auto at = whole.begin() + static_cast<std::ptrdiff_t>(r * V);
    expect_close(std::vector<float>(at, at + V), steps[static_cast<size_t>(first + r)], 0x1p-11f,
                 "row " + std::to_string(r) + " of the long chunk");
  }
  for (size_t p = static_cast<size_t>(first + chunk); p < tokens.size(); ++p) {
    const float* lg = e.step(tokens[p]);
    expect_close(std::vector<float>(lg, lg + V), steps[p], 0x1p-11f, "decode after it");
  }
}

TEST(Engine, EvictionWithBudgetAtLeastTheContextIsIdenticalToFull) {
  const vq::Model m = small_model();
  const int64_t ctx = m.config().seq_len;
  const auto tokens = vqtest::some_tokens(ctx, m.config().vocab_size);
  vq::Engine full(m, "full");
  const auto want = step_all(full, tokens);
  const std::string b = std::to_string(ctx);
  for (const std::string& spec :
       {"h2o:budget=" + b, "h2o:budget=" + std::to_string(ctx + 5) + ",recent=3",
        "curdkv:budget=" + b, "curdkv:budget=" + b + ",query=proxy"}) {
    vq::Engine e(m, spec);
    const auto got = step_all(e, tokens);
    for (size_t p = 0; p < tokens.size(); ++p)
      ASSERT_EQ(got[p], want[p]) << spec << " differs from full at position " << p;
  }
}

TEST(Engine, EveryEvictionMethodRespectsItsBudgetDuringGeneration) {
  const vq::Model m = small_model();
  const int64_t budget = 12;
  int tested = 0;
  for (const auto& info : vq::methods()) {
    if (info.family != vq::Family::Eviction || !vq::find_option(info, "budget")) continue;
    vq::CacheConfig cfg;
    try {
      cfg = vq::CacheConfig::parse(info.id + ":budget=" + std::to_string(budget));
    } catch (const vq::InvalidArgument& e) {
      ADD_FAILURE() << info.id << " rejects budget=" << budget << ": " << e.what();
      continue;
    }
    ++tested;
    for (bool strict : {false, true}) {
      vq::EngineOptions eo;
      eo.strict_view = strict;
      vq::Engine e(m, cfg, eo);
      auto check = [&](const char* when) {
        for (int64_t l = 0; l < e.n_layers(); ++l)
          for (int64_t h = 0; h < e.cache(l).kv_heads(); ++h)
            ASSERT_LE(e.cache(l).kept(0, h), budget) << info.id << " layer " << l << " after "
                                                     << when << " at position " << e.position();
      };
      const auto prompt = vqtest::some_tokens(20, m.config().vocab_size, 9);
      vq::GenerateOptions go;
      go.steps = 25;
      go.stop_at_bos = false;
      bool checked_prefill = false;
      vq::generate(e, prompt, go, [&](int32_t, int32_t) {
        if (!checked_prefill) {
          check("the 20-token prefill");
          checked_prefill = true;
        } else {
          check("a decode step");
        }
      });
      EXPECT_EQ(e.position(), 20 + 24) << info.id;
    }
  }
  EXPECT_GE(tested, 2);  // at least h2o and curdkv
}

TEST(Engine, StrictViewOnlyMattersWhenTheNewcomerIsDropped) {
  const vq::Model m = small_model();
  const auto tokens = vqtest::some_tokens(40, m.config().vocab_size);
  vq::EngineOptions strict;
  strict.strict_view = true;
  vq::Engine a(m, "full"), b(m, "full", strict);
  EXPECT_EQ(step_all(a, tokens), step_all(b, tokens));
  // h2o without a recent window drops most newcomers once full (they start at zero mass).
  vq::Engine c(m, "h2o:budget=8"), d(m, "h2o:budget=8", strict);
  EXPECT_NE(step_all(c, tokens), step_all(d, tokens));
}

TEST(Engine, ResetReproducesLogitsAndRejectsBadInput) {
  const vq::Model m = small_model();
  const auto tokens = vqtest::some_tokens(48, m.config().vocab_size);
  vq::Engine e(m, "curdkv:budget=10");
  const auto first = step_all(e, tokens);
  EXPECT_THROW(e.step(1), vq::InvalidArgument);  // position 48 == seq_len
  e.reset();
  EXPECT_EQ(step_all(e, tokens), first);
  e.reset();
  EXPECT_THROW(e.step(-1), vq::InvalidArgument);
  EXPECT_THROW(e.step(static_cast<int32_t>(m.config().vocab_size)), vq::InvalidArgument);
  EXPECT_THROW(e.prefill(std::vector<int32_t>(49, 1)), vq::InvalidArgument);
  EXPECT_EQ(e.position(), 0);
  EXPECT_THROW(vq::Engine(m, "nosuchmethod"), vq::InvalidArgument);
}

TEST(Engine, StatsSumTheLayers) {
  const vq::Model m = small_model();
  vq::Engine e(m, "h2o:budget=8");
  for (int32_t t : vqtest::some_tokens(30, m.config().vocab_size)) e.step(t);
  const vq::CacheStats st = e.stats();
  const int64_t D = m.config().head_dim(), L = m.config().n_layers, H = m.config().n_kv_heads;
  EXPECT_EQ(st.tokens_seen, 30);
  EXPECT_EQ(st.tokens_kept, 8);
  // 8 fp16 rows of keys and values per head and layer, in storage form exactly; resident bytes
  // add the buffers' spare capacity, positions and the policy's scores.
  EXPECT_DOUBLE_EQ(st.stored_bytes, static_cast<double>(L * H * 8 * D * 4));
  EXPECT_GE(st.content_bytes, st.stored_bytes);
  EXPECT_DOUBLE_EQ(st.kept_bytes, st.content_bytes + st.codec_param_bytes + st.policy_bytes +
                                      st.index_bytes + st.overhead_bytes);
  EXPECT_DOUBLE_EQ(st.full_seq_bytes, static_cast<double>(L * H * 30 * D * 4));
}

// --- Real models -------------------------------------------------------------------------------

std::string greedy_text(const std::string& model_path, const std::string& tok_path,
                        const std::string& spec, int64_t steps) {
  const vq::Model m = vq::Model::load(model_path);
  const vq::Tokenizer t = vq::Tokenizer::load(tok_path, m.config().vocab_size);
  vq::Engine e(m, spec);
  std::string out;
  vq::GenerateOptions go;
  go.steps = steps;
  vq::generate(e, {vq::Tokenizer::kBos}, go,
               [&](int32_t prev, int32_t next) { out += t.decode_piece(prev, next); });
  return out;
}

TEST(EngineRealModel, Stories260KGreedyOpening) {
  VQ_REQUIRE_MODEL_FILE(model, "stories260K.bin");
  VQ_REQUIRE_MODEL_FILE(tok, "tok512.bin");
  const std::string want =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park. One day, she saw a big, red ball.";
  EXPECT_EQ(greedy_text(model, tok, "full", 60).substr(0, want.size()), want);
  EXPECT_EQ(greedy_text(model, tok, "h2o:budget=512", 60).substr(0, want.size()), want);
}

TEST(EngineRealModel, BabyLlamaCharGreedyOpening) {
  VQ_REQUIRE_MODEL_FILE(model, "babyllama-char.bin");
  VQ_REQUIRE_MODEL_FILE(tok, "tok105.bin");
  const std::string want =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "sunshine.";
  EXPECT_EQ(greedy_text(model, tok, "full", 110).substr(0, want.size()), want);
}

TEST(EngineRealModel, Stories260KMatchesTheReferenceForward) {
  VQ_REQUIRE_MODEL_FILE(path, "stories260K.bin");
  const vq::Model m = vq::Model::load(path);
  // fp32 rows against run.c's fp32 cache: an fp16 cache would turn last-bit differences of the
  // two forward passes into whole fp16 steps where a value sits near a rounding boundary.
  vq::Engine e(m, "full+f32");
  vq::testing::ReferenceForward ref(m, /*fp16_kv=*/false);
  int32_t tok = vq::Tokenizer::kBos;
  for (int64_t p = 0; p < 64; ++p) {
    const float* lg = e.step(tok);
    const std::vector<float> got(lg, lg + m.config().vocab_size);
    expect_close(got, ref.forward(tok, p), 2e-5f, "position " + std::to_string(p));
    tok = vq::argmax(lg, m.config().vocab_size);
  }
}

}  // namespace

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "eval/fidelity.hpp"
#include "model_test_util.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"

namespace {

std::vector<int32_t> text_tokens(int64_t n, int64_t vocab) {
  auto t = vqtest::some_tokens(n + 1, vocab, 4);
  t.erase(t.begin());  // drop the BOS some_tokens starts with
  return t;
}

TEST(Fidelity, WindowsStartWithBosAndCoverTheText) {
  std::vector<int32_t> text(25);
  for (int i = 0; i < 25; ++i) text[static_cast<size_t>(i)] = 10 + i;
  const auto w = vq::eval::make_windows(text, 10, 0);
  ASSERT_EQ(w.size(), 3u);  // 9 + 9 + 7 text tokens
  EXPECT_EQ(w[0].size(), 10u);
  EXPECT_EQ(w[2].size(), 8u);
  for (const auto& x : w) EXPECT_EQ(x.front(), vq::Tokenizer::kBos);
  EXPECT_EQ(w[1][1], 19);
  const auto lim = vq::eval::make_windows(text, 10, 12);
  ASSERT_EQ(lim.size(), 2u);
  EXPECT_EQ(lim[1].size(), 4u);  // BOS + 3
  EXPECT_THROW(vq::eval::make_windows(text, 1, 0), vq::InvalidArgument);
}

TEST(Fidelity, IdenticalMethodsScoreZeroAndAccountingIsExact) {
  const vq::Model m = vq::Model::random(vqtest::small_config(48), 3, 0.3f);
  const auto windows = vq::eval::make_windows(text_tokens(100, 40), 48);  // 47 + 47 + 6
  vq::eval::FidelityOptions o;
  o.methods = {"full", "h2o:budget=48", "h2o:budget=8", "curdkv:budget=8,query=proxy"};
  const auto rep = vq::eval::run_fidelity(m, windows, o);
  ASSERT_EQ(rep.methods.size(), 4u);
  EXPECT_EQ(rep.predicted_tokens, 100);
  EXPECT_EQ(rep.n_windows, 3);
  const auto& full = rep.methods[0];
  EXPECT_EQ(full.spec, "full");
  EXPECT_EQ(full.predicted, 100);
  EXPECT_EQ(full.kl_mean, 0.0);
  EXPECT_GT(full.perplexity, 1.0);
  EXPECT_NEAR(full.perplexity, std::exp(full.nll_sum / 100.0), 1e-12);
  EXPECT_DOUBLE_EQ(full.stored_bytes_per_token, 4.0 * 8);  // fp16 K + V, head_dim 8
  // resident: the rows plus their positions and spare capacity, counted from the buffers
  EXPECT_GE(full.bytes_per_token, full.stored_bytes_per_token);
  EXPECT_NEAR(full.compression_ratio, 32.0 / full.bytes_per_token, 1e-12);

  const auto& same = rep.methods[1];  // budget = context: every logit identical
  EXPECT_EQ(same.kl_mean, 0.0);
  EXPECT_EQ(same.top1_agreement, 1.0);
  EXPECT_EQ(same.nll_sum, full.nll_sum);

  const auto& h2o = rep.methods[2];
  EXPECT_GT(h2o.kl_mean, 0.0);
  EXPECT_LE(h2o.top1_agreement, 1.0);
  // Bytes per token per layer-head: 32 * min(p + 1, 8) / (p + 1), averaged over every processed
  // position p of every window.
  double sum = 0;
  int64_t n = 0;
  for (const auto& w : windows)
    for (int64_t p = 0; p + 1 < static_cast<int64_t>(w.size()); ++p, ++n)
      sum += 32.0 * static_cast<double>(std::min<int64_t>(p + 1, 8)) / static_cast<double>(p + 1);
  EXPECT_NEAR(h2o.stored_bytes_per_token, sum / static_cast<double>(n), 1e-9);
  EXPECT_GE(h2o.bytes_per_token, h2o.stored_bytes_per_token);
  EXPECT_NEAR(h2o.compression_ratio, 32.0 / h2o.bytes_per_token, 1e-12);
  EXPECT_EQ(h2o.tokens_processed, 100);
  EXPECT_NEAR(h2o.ppl_delta, h2o.perplexity - full.perplexity, 1e-12);
}

TEST(Fidelity, PerplexityAgreesWithTheFidelityReference) {
  const vq::Model m = vq::Model::random(vqtest::small_config(48), 5, 0.3f);
  const auto windows = vq::eval::make_windows(text_tokens(60, 40), 48);
  vq::eval::FidelityOptions o;
  o.methods = {"h2o:budget=8"};
  const auto rep = vq::eval::run_fidelity(m, windows, o);
  const auto full = vq::eval::perplexity(m, windows, vq::CacheConfig::parse("full"));
  EXPECT_EQ(full.nll_sum, rep.reference.nll_sum);
  const auto h2o = vq::eval::perplexity(m, windows, vq::CacheConfig::parse("h2o:budget=8"));
  EXPECT_EQ(h2o.nll_sum, rep.methods[0].nll_sum);
  // With every token prefilled, a method sees exact attention: no difference from full.
  vq::eval::RunOptions pre;
  pre.prefill = 48;
  const auto h2o_pre =
      vq::eval::perplexity(m, windows, vq::CacheConfig::parse("h2o:budget=8"), pre);
  EXPECT_NEAR(h2o_pre.nll_sum, full.nll_sum, 1e-3);
}

TEST(Fidelity, BadSpecsFailBeforeAnyWork) {
  const vq::Model m = vq::Model::random(vqtest::small_config(48), 5, 0.3f);
  vq::eval::FidelityOptions o;
  o.methods = {"full", "h2o:budget=0"};
  EXPECT_THROW(vq::eval::run_fidelity(m, vq::eval::make_windows(text_tokens(10, 40), 48), o),
               vq::InvalidArgument);
  std::vector<std::vector<int32_t>> too_long{std::vector<int32_t>(49, 1)};
  o.methods = {"full"};
  EXPECT_THROW(vq::eval::run_fidelity(m, too_long, o), vq::InvalidArgument);
}

TEST(Fidelity, DefaultMethodsScaleWithTheContextAndAreRegistered) {
  const auto specs = vq::eval::default_methods(512, 8);
  ASSERT_FALSE(specs.empty());
  EXPECT_EQ(specs.front(), "full");
  auto has = [&](const std::string& s) {
    return std::find(specs.begin(), specs.end(), s) != specs.end();
  };
  EXPECT_TRUE(has("h2o:budget=64"));
  EXPECT_TRUE(has("curdkv:budget=256"));
  // every default builds a cache at its head_dim (q8_0 / q4_0 pick blocks that fit small heads)
  for (const auto& s : specs) EXPECT_NO_THROW(vq::make_cache(s, 8)) << s;
  EXPECT_TRUE(has("q8_0:block=8"));
  const auto small = vq::eval::default_methods(256, 16);
  EXPECT_EQ(small.size(), specs.size());
  for (const auto& s : small) EXPECT_NO_THROW(vq::make_cache(s, 16)) << s;
  for (const auto& s : vq::eval::default_methods(256, 64))
    EXPECT_NO_THROW(vq::make_cache(s, 64)) << s;
  EXPECT_NE(std::find(small.begin(), small.end(), "h2o:budget=32"), small.end());
}

}  // namespace

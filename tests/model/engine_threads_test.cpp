// The engine's results do not depend on the thread count: weight products are split by output
// rows and attention by query heads in pieces fixed by the shapes, each row / head computed with
// the same arithmetic. Logits of a two-chunk prefill and of greedy decoding, compared bit for bit
// between 1, 2 and 3 threads, with the default piece size and with min_piece_macs = 1 (every
// loop cut into its smallest pieces: rows in units, one query head per piece), on a random model
// and on the real models when present.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.hpp"
#include "model_test_util.hpp"
#include "test_util.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/threads.hpp"

namespace {

struct Run {
  std::vector<float> logits;  // every prefill position, then every decode step
  std::vector<int32_t> tokens;
};

Run run(const vq::Model& m, const std::string& spec, const std::vector<int32_t>& chunk1,
        const std::vector<int32_t>& chunk2, int64_t steps, int threads, int64_t piece_macs) {
  vq::set_thread_count(threads);
  vq::set_min_piece_macs(piece_macs);
  const int64_t V = m.config().vocab_size;
  vq::Engine e(m, spec);
  Run r;
  const std::vector<float>& a = e.prefill(chunk1, true);
  r.logits.assign(a.begin(), a.end());
  const std::vector<float>& b = e.prefill(chunk2, true);  // attends over what chunk 1 left
  r.logits.insert(r.logits.end(), b.begin(), b.end());
  int32_t tok = vq::argmax(b.data() + (static_cast<int64_t>(chunk2.size()) - 1) * V, V);
  for (int64_t s = 0; s < steps && e.position() < m.config().seq_len; ++s) {
    r.tokens.push_back(tok);
    const float* lg = e.step(tok);
    r.logits.insert(r.logits.end(), lg, lg + V);
    tok = vq::argmax(lg, V);
  }
  return r;
}

void expect_thread_count_invariant(const vq::Model& m, const std::vector<std::string>& specs,
                                   int64_t n1, int64_t n2, int64_t steps) {
  vqtest::RestoreThreads restore;
  const auto tokens = vqtest::some_tokens(n1 + n2, m.config().vocab_size, 5);
  const std::vector<int32_t> chunk1(tokens.begin(), tokens.begin() + n1);
  const std::vector<int32_t> chunk2(tokens.begin() + n1, tokens.end());
  for (const std::string& spec : specs) {
    const int64_t dflt = restore.piece;
    const Run one = run(m, spec, chunk1, chunk2, steps, 1, dflt);
    ASSERT_FALSE(one.tokens.empty());
    for (const auto& [threads, piece] :
         std::vector<std::pair<int, int64_t>>{{2, dflt}, {3, dflt}, {1, 1}, {2, 1}, {3, 1}}) {
      const Run got = run(m, spec, chunk1, chunk2, steps, threads, piece);
      EXPECT_EQ(got.tokens, one.tokens) << spec << ", " << threads << " threads, piece " << piece;
      ASSERT_EQ(got.logits.size(), one.logits.size());
      EXPECT_EQ(std::memcmp(got.logits.data(), one.logits.data(), one.logits.size() * 4), 0)
          << spec << ": logits differ between 1 thread and " << threads
          << " threads with min_piece_macs " << piece;
    }
  }
}

// fp16 rows, an eviction policy, a quantized store (queries rounded to q8_0), a window.
std::vector<std::string> specs(int64_t head_dim) {
  return {"full", "h2o:budget=64,n_sink=4", head_dim % 32 == 0 ? "q8_0" : "q8_0:block=8",
          "streaming_llm:budget=96,n_sink=4"};
}

}  // namespace

TEST(EngineThreads, RandomModelBitIdenticalFor1To3Threads) {
  // head_dim 128, 4 query heads on one KV head (pieces of one head split a KV group; the real
  // models cover several KV heads).
  const vq::ModelConfig c{.dim = 512,
                          .hidden_dim = 1024,
                          .n_layers = 1,
                          .n_heads = 4,
                          .n_kv_heads = 1,
                          .vocab_size = 2048,
                          .seq_len = 540};
  const vq::Model m = vq::Model::random(c, 9, 0.2f);
  expect_thread_count_invariant(m, specs(128), 300, 200, 30);
}

TEST(EngineThreads, Stories260KBitIdenticalFor1To3Threads) {
  VQ_REQUIRE_MODEL_FILE(path, "stories260K.bin");
  const vq::Model m = vq::Model::load(path);
  expect_thread_count_invariant(m, specs(8), 200, 100, 60);
}

TEST(EngineThreads, Prose1kBitIdenticalFor1To3Threads) {
  VQ_REQUIRE_MODEL_FILE(path, "prose1k.bin");
  const vq::Model m = vq::Model::load(path);
  expect_thread_count_invariant(m, {"full", "h2o:budget=64,n_sink=4"}, 400, 300, 40);
}

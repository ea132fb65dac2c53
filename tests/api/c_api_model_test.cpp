// The C API's models: open by path (.gguf, llama2.c .bin with its tokenizer), tokenize, generate
// and evaluate give what the C++ library (and the CLI) give, and every misuse is a status code with
// a message naming the problem.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "eval/fidelity.hpp"
#include "model/model_test_util.hpp"
#include "veloxquant/c_api.h"
#include "veloxquant/text_model.hpp"

namespace {

// Owns a vq_model for the length of a test.
struct ModelHandle {
  vq_model* m = nullptr;
  ~ModelHandle() { vq_model_destroy(m); }
};

std::vector<int32_t> c_tokenize(const vq_model* m, const std::string& text, int add_bos) {
  int64_t n = -1;
  EXPECT_EQ(vq_model_tokenize(m, text.data(), text.size(), add_bos, nullptr, 0, &n),
            text.empty() && !add_bos ? VQ_OK : VQ_ERR_INVALID_ARGUMENT);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  EXPECT_EQ(vq_model_tokenize(m, text.data(), text.size(), add_bos, ids.data(), n, &n), VQ_OK)
      << vq_last_error();
  return ids;
}

std::string c_generate(const vq_model* m, const char* prompt, const char* spec, int64_t steps,
                       std::vector<int32_t>* tokens = nullptr) {
  char* text = nullptr;
  int32_t* ids = nullptr;
  int64_t n = -1;
  EXPECT_EQ(vq_model_generate(m, prompt, spec, steps, 0, &text, &ids, &n), VQ_OK)
      << vq_last_error();
  std::string s = text ? text : "";
  if (tokens) tokens->assign(ids, ids + n);
  vq_free(text);
  vq_free(ids);
  return s;
}

TEST(CApiModel, GgufTokenizeGenerateMatchCpp) {
  VQ_REQUIRE_MODEL_FILE(gguf, "stories260K.gguf");
  ModelHandle h;
  ASSERT_EQ(vq_model_open(gguf.c_str(), nullptr, &h.m), VQ_OK) << vq_last_error();
  const vq::TextModel ref = vq::TextModel::open(gguf);

  vq_model_info info{};
  ASSERT_EQ(vq_model_get_info(h.m, &info), VQ_OK);
  const vq::ModelConfig& c = ref.model.config();
  EXPECT_EQ(info.vocab_size, c.vocab_size);
  EXPECT_EQ(info.n_layers, c.n_layers);
  EXPECT_EQ(info.head_dim, c.head_dim());
  EXPECT_EQ(info.context_length, c.seq_len);
  EXPECT_EQ(info.bos_id, ref.tok->bos_id());
  EXPECT_EQ(info.eos_id, ref.tok->eos_id());

  const std::string text = "Once upon a time, there was a dog.";
  EXPECT_EQ(c_tokenize(h.m, text, 1), ref.tok->encode(text, true, false));
  EXPECT_EQ(c_tokenize(h.m, text, 0), ref.tok->encode(text, false, false));
  EXPECT_TRUE(c_tokenize(h.m, "", 0).empty());

  // A buffer one id too small is refused; the count still comes back.
  const std::vector<int32_t> want = ref.tok->encode(text, true, false);
  std::vector<int32_t> small(want.size() - 1);
  int64_t n = 0;
  EXPECT_EQ(vq_model_tokenize(h.m, text.data(), text.size(), 1, small.data(),
                              static_cast<int64_t>(small.size()), &n),
            VQ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(n, static_cast<int64_t>(want.size()));
  EXPECT_NE(std::string(vq_last_error()).find("capacity"), std::string::npos) << vq_last_error();

  char* back = nullptr;
  size_t back_size = 0;
  ASSERT_EQ(
      vq_model_detokenize(h.m, want.data(), static_cast<int64_t>(want.size()), &back, &back_size),
      VQ_OK);
  EXPECT_EQ(std::string(back, back_size), text);  // no dummy-prefix space
  vq_free(back);

  for (const char* spec : {"full", "snapkv:budget=64+q8_0:block=8"}) {
    std::vector<int32_t> toks;
    const std::string got = c_generate(h.m, "Once upon a time", spec, 40, &toks);
    vq::GenerateOptions go;
    go.steps = 40;
    const vq::GeneratedText g = vq::generate_text(ref, ref.encode_prompt("Once upon a time"),
                                                  vq::CacheConfig::parse(spec), {}, go);
    EXPECT_EQ(got, g.text) << spec;
    EXPECT_EQ(toks, g.tokens) << spec;
    EXPECT_EQ(got.rfind("Once upon a time", 0), 0u) << got;
    EXPECT_GT(got.size(), std::string("Once upon a time").size() + 20) << got;
  }
  // NULL prompt: BOS alone; zero steps: the prompt only, no tokens.
  EXPECT_EQ(c_generate(h.m, nullptr, nullptr, 20).rfind("Once upon a time", 0), 0u);
  std::vector<int32_t> none{1};
  EXPECT_EQ(c_generate(h.m, "Hello", "full", 0, &none), "Hello");
  EXPECT_TRUE(none.empty());
}

// `veloxquant generate` prints the same text (plus a newline).
TEST(CApiModel, GenerateEqualsCli) {
  if (!vqtest::have_cli()) GTEST_SKIP() << "the veloxquant CLI is not built";
  VQ_REQUIRE_MODEL_FILE(bin, "stories260K.bin");
  ModelHandle h;
  ASSERT_EQ(vq_model_open(bin.c_str(), nullptr, &h.m), VQ_OK) << vq_last_error();
  const std::string got = c_generate(h.m, "The cat", "snapkv:budget=64+q8_0:block=8", 60);
  const vqtest::CliRun r = vqtest::run_cli("-q generate --model '" + bin +
                                           "' --prompt 'The cat' --method "
                                           "'snapkv:budget=64+q8_0:block=8' --steps 60");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, got + "\n");
}

TEST(CApiModel, EvaluateMatchesRunFidelity) {
  VQ_REQUIRE_MODEL_FILE(bin, "stories260K.bin");
  VQ_REQUIRE_MODEL_FILE(text_path, "tinystories-val.txt");
  ModelHandle h;
  ASSERT_EQ(vq_model_open(bin.c_str(), nullptr, &h.m), VQ_OK) << vq_last_error();
  const vq::TextModel ref = vq::TextModel::open(bin);
  std::ifstream f(text_path, std::ios::binary);
  const std::string text = std::string(std::istreambuf_iterator<char>(f), {}).substr(0, 6000);
  const std::vector<int32_t> ids = ref.tok->encode(text, false, false);
  ASSERT_GT(ids.size(), 700u);

  vq_eval_result full{}, q8{};
  ASSERT_EQ(vq_model_evaluate(h.m, ids.data(), static_cast<int64_t>(ids.size()), "full", 700, 0, 0,
                              &full),
            VQ_OK)
      << vq_last_error();
  ASSERT_EQ(vq_model_evaluate(h.m, ids.data(), static_cast<int64_t>(ids.size()),
                              "snapkv:budget=64+q8_0:block=8", 700, 0, 0, &q8),
            VQ_OK)
      << vq_last_error();
  EXPECT_EQ(full.predicted_tokens, 700);
  EXPECT_EQ(full.windows, 2);  // context 512: 511 + 189 text tokens
  EXPECT_EQ(full.kl_mean, 0.0);
  EXPECT_EQ(full.perplexity, full.full_perplexity);

  vq::eval::FidelityOptions fo;
  fo.methods = {"snapkv:budget=64+q8_0:block=8"};
  const auto rep = vq::eval::run_fidelity(
      ref.model, vq::eval::make_windows(ids, ref.model.config().seq_len, 700, ref.bos()), fo);
  EXPECT_EQ(q8.kl_mean, rep.methods[0].kl_mean);
  EXPECT_EQ(q8.perplexity, rep.methods[0].perplexity);
  EXPECT_EQ(q8.top1_agreement, rep.methods[0].top1_agreement);
  EXPECT_EQ(q8.full_perplexity, full.perplexity);
  EXPECT_GT(q8.kl_mean, 0.0);
  EXPECT_EQ(q8.compression_ratio, rep.methods[0].compression_ratio);
  EXPECT_EQ(q8.bytes_per_token, rep.methods[0].bytes_per_token);
  EXPECT_GT(q8.bytes_per_token, 0.0);
}

// vq_set_threads: refused outside [1, 1024] with the value in the message; any count in range
// gives the same evaluation, bit for bit.
TEST(CApiModel, ThreadCountChangesNoResult) {
  int before = 0;
  ASSERT_EQ(vq_get_threads(&before), VQ_OK);
  EXPECT_GE(before, 1);
  EXPECT_EQ(vq_set_threads(0), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vq_last_error()).find('0'), std::string::npos) << vq_last_error();
  EXPECT_EQ(vq_set_threads(5000), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vq_last_error()).find("5000"), std::string::npos) << vq_last_error();
  EXPECT_EQ(vq_get_threads(nullptr), VQ_ERR_INVALID_ARGUMENT);

  VQ_REQUIRE_MODEL_FILE(bin, "stories260K.bin");
  ModelHandle h;
  ASSERT_EQ(vq_model_open(bin.c_str(), nullptr, &h.m), VQ_OK) << vq_last_error();
  std::vector<int32_t> ids;
  for (int i = 0; i < 300; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % 500 + 3));
  vq_eval_result r[2]{};
  for (int t = 0; t < 2; ++t) {
    ASSERT_EQ(vq_set_threads(t == 0 ? 1 : 3), VQ_OK) << vq_last_error();
    int now = 0;
    ASSERT_EQ(vq_get_threads(&now), VQ_OK);
    EXPECT_EQ(now, t == 0 ? 1 : 3);
    ASSERT_EQ(vq_model_evaluate(h.m, ids.data(), static_cast<int64_t>(ids.size()),
                                "h2o:budget=32,recent=8", 0, 0, 0, &r[t]),
              VQ_OK)
        << vq_last_error();
  }
  ASSERT_EQ(vq_set_threads(before), VQ_OK);
  EXPECT_EQ(r[0].kl_mean, r[1].kl_mean);
  EXPECT_EQ(r[0].perplexity, r[1].perplexity);
  EXPECT_EQ(r[0].top1_agreement, r[1].top1_agreement);
  EXPECT_GT(r[0].kl_mean, 0.0);
}

// vq_model_open_ex: "copy" reads the file into memory and gives the mapped model's text; NULL and
// "" are "map"; another value is refused, named, before anything is opened.
TEST(CApiModel, OpenExLoadsByCopyOrMap) {
  VQ_REQUIRE_MODEL_FILE(gguf, "stories260K.gguf");
  ModelHandle mapped, copied, dflt;
  ASSERT_EQ(vq_model_open_ex(gguf.c_str(), nullptr, "map", &mapped.m), VQ_OK) << vq_last_error();
  ASSERT_EQ(vq_model_open_ex(gguf.c_str(), nullptr, "copy", &copied.m), VQ_OK) << vq_last_error();
  ASSERT_EQ(vq_model_open_ex(gguf.c_str(), "", nullptr, &dflt.m), VQ_OK) << vq_last_error();
  const std::string want = c_generate(mapped.m, "Once upon a time", "h2o:budget=32", 60);
  EXPECT_GT(want.size(), std::string("Once upon a time").size() + 20);
  EXPECT_EQ(c_generate(copied.m, "Once upon a time", "h2o:budget=32", 60), want);
  EXPECT_EQ(c_generate(dflt.m, "Once upon a time", "h2o:budget=32", 60), want);

  int sentinel = 0;  // m must come back NULL
  vq_model* m = reinterpret_cast<vq_model*>(&sentinel);
  EXPECT_EQ(vq_model_open_ex(gguf.c_str(), nullptr, "mmap", &m), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(vq_last_error()).find("'mmap'"), std::string::npos) << vq_last_error();
  EXPECT_NE(std::string(vq_last_error()).find("map, copy"), std::string::npos) << vq_last_error();
  EXPECT_EQ(vq_model_open_ex("/nonexistent/m.gguf", nullptr, "copy", &m), VQ_ERR_IO);
  EXPECT_EQ(m, nullptr);
  m = reinterpret_cast<vq_model*>(&sentinel);
  EXPECT_EQ(vq_model_open_ex(nullptr, nullptr, "copy", &m), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(m, nullptr);
}

TEST(CApiModel, ErrorsAreStatusCodesWithMessages) {
  vq_model* m = nullptr;
  EXPECT_EQ(vq_model_open("/nonexistent/m.gguf", nullptr, &m), VQ_ERR_IO);
  EXPECT_NE(std::string(vq_last_error()).find("/nonexistent/m.gguf"), std::string::npos)
      << vq_last_error();
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(vq_model_open(nullptr, nullptr, &m), VQ_ERR_INVALID_ARGUMENT);
  vq_model_destroy(nullptr);

  VQ_REQUIRE_MODEL_FILE(bin, "stories260K.bin");
  VQ_REQUIRE_MODEL_FILE(tok, "tok512.bin");
  ModelHandle h;
  ASSERT_EQ(vq_model_open(bin.c_str(), tok.c_str(), &h.m), VQ_OK) << vq_last_error();
  vq_model* wrong = nullptr;
  VQ_REQUIRE_MODEL_FILE(tok105, "tok105.bin");
  EXPECT_EQ(vq_model_open(bin.c_str(), tok105.c_str(), &wrong), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vq_last_error()).find("105"), std::string::npos) << vq_last_error();

  char* text = nullptr;
  EXPECT_EQ(vq_model_generate(h.m, "a", "h2o:budget=0", 5, 0, &text, nullptr, nullptr),
            VQ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vq_last_error()).find("budget"), std::string::npos) << vq_last_error();
  EXPECT_EQ(text, nullptr);
  EXPECT_EQ(vq_model_generate(h.m, "a", "full", -1, 0, &text, nullptr, nullptr),
            VQ_ERR_INVALID_ARGUMENT);
  const int32_t bad[] = {5, 512};
  vq_eval_result r{};
  EXPECT_EQ(vq_model_evaluate(h.m, bad, 2, "full", 0, 0, 0, &r), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vq_last_error()).find("512"), std::string::npos) << vq_last_error();
  EXPECT_EQ(vq_model_evaluate(h.m, bad, 0, "full", 0, 0, 0, &r), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(vq_model_evaluate(h.m, nullptr, 3, "full", 0, 0, 0, &r), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(vq_model_detokenize(h.m, bad, 2, &text, nullptr), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(vq_model_tokenize(h.m, "abc", 3, 1, nullptr, 0, nullptr), VQ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(vq_model_get_info(nullptr, nullptr), VQ_ERR_INVALID_ARGUMENT);
}

}  // namespace

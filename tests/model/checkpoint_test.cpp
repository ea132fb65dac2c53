#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/rng.hpp"
#include "model/layout.hpp"
#include "model_test_util.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"

namespace {

using vqtest::TempFile;

// Load `path` expecting FormatError whose message contains every string of `needles`.
void expect_format_error(const std::string& path, std::initializer_list<const char*> needles) {
  try {
    vq::Model::load(path);
    FAIL() << "expected FormatError for " << path;
  } catch (const vq::FormatError& e) {
    const std::string msg = e.what();
    for (const char* n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
}

void put_i32(std::vector<char>& bytes, size_t field, int32_t v) {
  std::memcpy(bytes.data() + field * 4, &v, 4);
}

TEST(Checkpoint, SaveLoadRoundTripKeepsConfigAndWeights) {
  for (bool shared : {true, false}) {
    const vq::ModelConfig c = vqtest::small_config(48, shared);
    const vq::Model m = vq::Model::random(c, 7);
    TempFile f(shared ? "rt_shared.bin" : "rt_unshared.bin");
    m.save(f.path());
    EXPECT_EQ(static_cast<int64_t>(f.read().size()), c.file_bytes());
    const vq::Model back = vq::Model::load(f.path());
    EXPECT_EQ(back.config().dim, c.dim);
    EXPECT_EQ(back.config().n_kv_heads, c.n_kv_heads);
    EXPECT_EQ(back.config().shared_classifier, shared);
    EXPECT_EQ(back.config().vocab_size, c.vocab_size);
    EXPECT_EQ(std::memcmp(back.layer(1).w2, m.layer(1).w2,
                          sizeof(float) * static_cast<size_t>(c.dim * c.hidden_dim)),
              0);
    EXPECT_EQ(std::memcmp(back.classifier(), m.classifier(),
                          sizeof(float) * static_cast<size_t>(c.vocab_size * c.dim)),
              0);
    if (shared)
      EXPECT_EQ(back.classifier(), back.token_embedding());
    else
      EXPECT_NE(back.classifier(), back.token_embedding());
  }
}

TEST(Checkpoint, LayoutMatchesTheLlama2cOrder) {
  const vq::ModelConfig c = vqtest::small_config(48, false);
  const auto spans = vq::model::checkpoint_layout(c);
  const std::vector<std::string> order = {
      "token_embedding", "rms_att", "wq", "wk", "wv",        "wo",
      "rms_ffn",         "w1",      "w2", "w3", "rms_final", "freq_cis_real",
      "freq_cis_imag",   "wcls"};
  ASSERT_EQ(spans.size(), order.size());
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(spans[i].name, order[i]);
  EXPECT_EQ(vq::model::find_span(spans, "wk").count, c.n_layers * c.kv_dim() * c.dim);
  EXPECT_EQ(vq::model::find_span(spans, "freq_cis_real").count, c.seq_len * c.head_dim() / 2);
  EXPECT_EQ(c.file_bytes(), 28 + 4 * (spans.back().offset + spans.back().count));
}

TEST(Checkpoint, MissingFileIsIoError) {
  EXPECT_THROW(vq::Model::load("/nonexistent/dir/model.bin"), vq::IoError);
}

TEST(Checkpoint, TruncatedFileNamesTheTensorWhereDataEnds) {
  const vq::ModelConfig c = vqtest::small_config();
  TempFile f("trunc.bin");
  vq::Model::random(c, 1).save(f.path());
  const std::vector<char> good = f.read();
  const auto spans = vq::model::checkpoint_layout(c);
  // Cut inside wq (layer 1) and inside the last tensor, and one byte short.
  const auto& wq = vq::model::find_span(spans, "wq");
  std::vector<char> cut(good.begin(), good.begin() + 28 + 4 * (wq.offset + wq.count - 5));
  f.write(cut);
  expect_format_error(f.path(), {"truncated", "'wq'"});
  cut.assign(good.begin(), good.end() - 4);
  f.write(cut);
  expect_format_error(f.path(), {"truncated", "'freq_cis_imag'"});
  cut.assign(good.begin(), good.end() - 1);
  f.write(cut);
  expect_format_error(f.path(), {"truncated"});
  cut.assign(good.begin(), good.begin() + 28);  // header only
  f.write(cut);
  expect_format_error(f.path(), {"truncated", "'token_embedding'"});
  cut.assign(good.begin(), good.begin() + 10);  // not even a header
  f.write(cut);
  expect_format_error(f.path(), {"28-byte header"});
}

TEST(Checkpoint, PaddedFileIsRejected) {
  const vq::ModelConfig c = vqtest::small_config(48, false);
  TempFile f("pad.bin");
  vq::Model::random(c, 1).save(f.path());
  std::vector<char> bytes = f.read();
  bytes.push_back(0);
  f.write(bytes);
  expect_format_error(f.path(), {"1 bytes after its last tensor 'wcls'"});
  for (int i = 0; i < 7; ++i) bytes.push_back(0);
  f.write(bytes);
  expect_format_error(f.path(), {"8 bytes after"});
}

TEST(Checkpoint, SharedFlagChangesTheExpectedLength) {
  // An unshared file read as shared (sign flipped) is 'padded' by exactly wcls.
  const vq::ModelConfig c = vqtest::small_config(48, false);
  TempFile f("flip.bin");
  vq::Model::random(c, 3).save(f.path());
  std::vector<char> bytes = f.read();
  put_i32(bytes, 5, static_cast<int32_t>(c.vocab_size));
  f.write(bytes);
  expect_format_error(f.path(),
                      {std::to_string(4 * c.vocab_size * c.dim).c_str(), "after its last tensor"});
}

TEST(Checkpoint, NonsenseHeaderFieldsAreNamed) {
  const vq::ModelConfig c = vqtest::small_config();
  TempFile f("hdr.bin");
  vq::Model::random(c, 1).save(f.path());
  const std::vector<char> good = f.read();
  struct Case {
    size_t field;
    int32_t value;
    const char* needle;
  };
  const Case cases[] = {
      {0, 0, "dim = 0"},
      {0, -64, "dim = -64"},
      {1, 0, "hidden_dim = 0"},
      {2, 100000, "n_layers = 100000"},
      {3, 5, "not a multiple of n_heads"},  // 32 % 5
      {3, 64, "n_heads = 64"},              // more heads than dim allows
      {4, 3, "not a multiple of n_kv_heads"},
      {4, 8, "n_kv_heads = 8"},  // above n_heads
      {5, 0, "vocab_size"},
      {5, std::numeric_limits<int32_t>::min(), "vocab_size"},
      {6, 0, "seq_len = 0"},
      {6, std::numeric_limits<int32_t>::max(), "seq_len"},
      {3, 32, "head_dim"},  // head_dim 1 is odd
  };
  for (const auto& k : cases) {
    std::vector<char> bytes = good;
    put_i32(bytes, k.field, k.value);
    f.write(bytes);
    SCOPED_TRACE(k.needle);
    expect_format_error(f.path(), {k.needle});
  }
}

TEST(Checkpoint, RandomGarbageIsRejectedCleanly) {
  vq::Rng rng(5);
  TempFile f("garbage.bin");
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<char> bytes(static_cast<size_t>(rng.below(4000)));
    for (auto& b : bytes) b = static_cast<char>(rng.below(256));
    f.write(bytes);
    EXPECT_THROW(vq::Model::load(f.path()), vq::FormatError) << "trial " << trial;
  }
}

TEST(Checkpoint, NonFiniteWeightNamesTensorAndLayer) {
  const vq::ModelConfig c = vqtest::small_config();
  TempFile f("nan.bin");
  vq::Model::random(c, 1).save(f.path());
  std::vector<char> bytes = f.read();
  const auto layout = vq::model::checkpoint_layout(c);  // keep the spans alive
  const auto& w3 = vq::model::find_span(layout, "w3");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t per = w3.count / w3.layers;
  std::memcpy(bytes.data() + 28 + 4 * (w3.offset + per + 3), &nan, 4);  // layer 1, element 3
  f.write(bytes);
  expect_format_error(f.path(), {"'w3'", "layer 1", "element 3"});
}

TEST(Checkpoint, RealModelsLoadWithTheDocumentedConfigs) {
  VQ_REQUIRE_MODEL_FILE(stories, "stories260K.bin");
  const vq::Model m = vq::Model::load(stories);
  const auto& c = m.config();
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim(), 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  VQ_REQUIRE_MODEL_FILE(baby, "babyllama-char.bin");
  const vq::Model b = vq::Model::load(baby);
  EXPECT_EQ(b.config().head_dim(), 16);
  EXPECT_EQ(b.config().vocab_size, 105);
  EXPECT_EQ(b.config().seq_len, 256);
}

TEST(ModelFiles, SearchHonoursEnvironmentAndExplainsAbsence) {
  TempFile f("probe_model_file.bin");
  f.write({'x'});
  const std::string dir = std::filesystem::path(f.path()).parent_path().string();
  const std::string name = std::filesystem::path(f.path()).filename().string();
  const char* old = std::getenv("VQ_MODELS_DIR");
  const std::string saved = old ? old : "";
  ::setenv("VQ_MODELS_DIR", dir.c_str(), 1);
  EXPECT_EQ(vq::model_search_dirs().front(), std::filesystem::weakly_canonical(dir).string());
  EXPECT_FALSE(vq::locate_model_file(name).empty());
  EXPECT_EQ(vq::find_model_file(name, "/given/path.bin"), "/given/path.bin");
  if (old)
    ::setenv("VQ_MODELS_DIR", saved.c_str(), 1);
  else
    ::unsetenv("VQ_MODELS_DIR");
  try {
    vq::find_model_file("no_such_model_file.bin");
    FAIL() << "expected IoError";
  } catch (const vq::IoError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("not found"), std::string::npos) << msg;
    EXPECT_NE(msg.find("VQ_MODELS_DIR"), std::string::npos) << msg;
  }
  // Every known file has a download source.
  for (const auto& k : vq::known_model_files())
    EXPECT_NE(k.source.find("https://"), std::string::npos);
  EXPECT_EQ(vq::default_tokenizer_for(512), "tok512.bin");
  EXPECT_EQ(vq::default_tokenizer_for(105), "tok105.bin");
  EXPECT_EQ(vq::default_tokenizer_for(7), "");
}

}  // namespace

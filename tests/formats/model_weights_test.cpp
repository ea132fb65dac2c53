// ModelWeights: one loader over GGUF and Hugging Face checkpoints.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "formats/file_writers.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/model_weights.hpp"
#include "veloxquant/tokenizers.hpp"

namespace {

namespace fs = std::filesystem;

TEST(ModelWeights, Stories260KGgufMatchesTheBin) {
  const std::string g = vq::locate_model_file("stories260K.gguf");
  const std::string b = vq::locate_model_file("stories260K.bin");
  if (g.empty() || b.empty()) GTEST_SKIP() << "stories260K.gguf / .bin not found";
  const vq::ModelWeights w = vq::ModelWeights::open(g);
  const vq::Model m = vq::Model::load(b);
  const vq::ArchConfig& c = w.config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.dim, m.config().dim);
  EXPECT_EQ(c.n_layers, m.config().n_layers);
  EXPECT_EQ(c.n_heads, m.config().n_heads);
  EXPECT_EQ(c.n_kv_heads, m.config().n_kv_heads);
  EXPECT_EQ(c.hidden_dim, m.config().hidden_dim);
  EXPECT_EQ(c.vocab_size, m.config().vocab_size);
  EXPECT_EQ(c.context_length, m.config().seq_len);
  EXPECT_EQ(c.head_dim, m.config().head_dim());
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ(c.rope_layout, vq::RopeLayout::AdjacentPairs);
  const std::vector<float> wq = w.get("blk.3.attn_q.weight").dequantize();
  EXPECT_EQ(std::memcmp(wq.data(), m.layer(3).wq, wq.size() * 4), 0);
  EXPECT_EQ(w.get("blk.3.attn_q.weight").shape, (std::vector<int64_t>{c.dim, c.dim}));
  EXPECT_THROW(w.get("nope"), vq::FormatError);
}

TEST(ModelWeights, UnsupportedArchitectureIsRefusedByName) {
  const std::string g = vq::locate_vocab_file("ggml-vocab-gpt-2.gguf");
  if (g.empty()) GTEST_SKIP() << "ggml-vocab-gpt-2.gguf not found";
  try {
    vq::ModelWeights::open(g);
    ADD_FAILURE() << "accepted";
  } catch (const vq::FormatError& e) {
    EXPECT_NE(
        std::string(e.what()).find("architecture 'gpt2' is not supported (supported: llama, qwen2"),
        std::string::npos)
        << e.what();
  }
}

struct HfDir {
  fs::path p = fs::temp_directory_path() / ("vq_mw_" + std::to_string(::getpid()));
  HfDir() { fs::create_directories(p); }
  ~HfDir() {
    std::error_code ec;
    fs::remove_all(p, ec);
  }
  void write(const std::string& name, const std::string& s) const {
    std::ofstream f(p / name, std::ios::binary);
    f << s;
  }
  void write(const std::string& name, const vqtest::Bytes& b) const {
    std::ofstream f(p / name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
};

// A 1-layer model of the given type with every tensor at its Hugging Face name.
vqtest::SafetensorsWriter hf_weights(bool bias, int64_t q_rows = 8) {
  vqtest::SafetensorsWriter w;
  auto t = [&](const std::string& n, std::vector<int64_t> shape) {
    int64_t k = 1;
    for (int64_t d : shape) k *= d;
    std::vector<float> v(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) v[i] = 0.01f * static_cast<float>(i % 97);
    w.add_f32(n, shape, v);
  };
  t("model.embed_tokens.weight", {5, 8});
  t("model.norm.weight", {8});
  const std::string l = "model.layers.0.";
  t(l + "input_layernorm.weight", {8});
  t(l + "post_attention_layernorm.weight", {8});
  t(l + "self_attn.q_proj.weight", {q_rows, 8});
  t(l + "self_attn.k_proj.weight", {4, 8});
  t(l + "self_attn.v_proj.weight", {4, 8});
  t(l + "self_attn.o_proj.weight", {8, 8});
  t(l + "mlp.gate_proj.weight", {12, 8});
  t(l + "mlp.up_proj.weight", {12, 8});
  t(l + "mlp.down_proj.weight", {8, 12});
  if (bias) {
    t(l + "self_attn.q_proj.bias", {8});
    t(l + "self_attn.k_proj.bias", {4});
    t(l + "self_attn.v_proj.bias", {4});
  }
  return w;
}

const char* kConfig =
    R"({"model_type":"%s","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,
  "num_key_value_heads":1,"intermediate_size":12,"vocab_size":5,"max_position_embeddings":16,
  "tie_word_embeddings":true,"rope_theta":500000.0})";

std::string config(const char* type) {
  char buf[512];
  std::snprintf(buf, sizeof buf, kConfig, type);
  return buf;
}

TEST(ModelWeights, HuggingFaceDirectoryMapsNamesAndChecksShapes) {
  HfDir d;
  d.write("config.json", config("llama"));
  d.write("model.safetensors", hf_weights(false).build());
  const vq::ModelWeights w = vq::ModelWeights::open(d.p.string());
  EXPECT_EQ(w.config().architecture, "llama");
  EXPECT_EQ(w.config().rope_layout, vq::RopeLayout::HalfSplit);
  EXPECT_EQ(w.config().rope_theta, 500000.0);
  EXPECT_TRUE(w.config().tied_output);
  EXPECT_EQ(w.get("blk.0.ffn_down.weight").source, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(w.get("blk.0.ffn_down.weight").shape, (std::vector<int64_t>{8, 12}));
  EXPECT_EQ(w.get("blk.0.attn_k.weight").dequantize()[5], 0.01f * 5.0f);
  EXPECT_EQ(w.names().size(), 11u);

  // Qwen2 needs the q/k/v biases.
  d.write("config.json", config("qwen2"));
  try {
    vq::ModelWeights::open(d.p.string());
    ADD_FAILURE() << "accepted";
  } catch (const vq::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor blk.0.attn_q.bias is missing"), std::string::npos)
        << e.what();
  }
  d.write("model.safetensors", hf_weights(true).build());
  EXPECT_TRUE(vq::ModelWeights::open(d.p.string()).config().qkv_bias);

  // A wrong shape is named with both shapes.
  d.write("config.json", config("llama"));
  d.write("model.safetensors", hf_weights(false, 6).build());
  try {
    vq::ModelWeights::open(d.p.string());
    ADD_FAILURE() << "accepted";
  } catch (const vq::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "tensor blk.0.attn_q.weight (model.layers.0.self_attn.q_proj.weight) has shape "
                  "[6, 8], expected [8, 8]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace

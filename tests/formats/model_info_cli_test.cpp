// `veloxquant info` on model files: a GGUF (stories260K.gguf) and a tiny Hugging Face directory
// written by the test writers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "formats/file_writers.hpp"
#include "model/model_test_util.hpp"
#include "veloxquant/model.hpp"

namespace {

namespace fs = std::filesystem;

TEST(InfoCli, HuggingFaceDirectory) {
  const fs::path dir = fs::temp_directory_path() / ("vq_info_hf_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "config.json");
    f << R"({"model_type":"qwen2","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,
      "num_key_value_heads":1,"intermediate_size":16,"vocab_size":4,"max_position_embeddings":32,
      "tie_word_embeddings":true})";
  }
  vqtest::SafetensorsWriter w;
  w.add_f32("model.embed_tokens.weight", {4, 8}, std::vector<float>(32, 0.5f));
  w.add("model.norm.weight", "BF16", {8}, vqtest::Bytes(16, 0));
  const vqtest::Bytes b = w.build();
  {
    std::ofstream f(dir / "model.safetensors", std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  vqtest::CliRun r = vqtest::run_cli("info --json - " + dir.string());
  if (r.status == -1) GTEST_SKIP() << "no CLI";
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["architecture"], "qwen2");
  EXPECT_EQ(j["config"]["context_length"], 32);
  EXPECT_EQ(j["config"]["attention_bias"], true);
  EXPECT_EQ(j["parameters"], 40);
  EXPECT_EQ(j["tensor_bytes"], 128 + 16);
  EXPECT_EQ(j["types"]["BF16"]["tensors"], 1);
  EXPECT_NE(j["tokenizer"].get<std::string>().find("none usable"), std::string::npos);
  r = vqtest::run_cli("info " + (dir / "missing").string() + ".gguf");
  EXPECT_EQ(r.status, 1);
  fs::remove_all(dir);
}

TEST(InfoCli, Stories260KGguf) {
  const std::string g = vq::locate_model_file("stories260K.gguf");
  if (g.empty()) GTEST_SKIP() << "stories260K.gguf not found";
  vqtest::CliRun r = vqtest::run_cli("info --summary --json - " + g);
  if (r.status == -1) GTEST_SKIP() << "no CLI";
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["config"]["context_length"], 512);
  EXPECT_EQ(j["config"]["head_count_kv"], 4);
  EXPECT_EQ(j["tensor_count"], 47);
  EXPECT_EQ(j["types"]["F32"]["tensors"], 47);
  EXPECT_NE(j["tokenizer"].get<std::string>().find("gguf llama"), std::string::npos);
}

}  // namespace

// safetensors reader (single and sharded) and config.json parsing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "formats/file_writers.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/hf_config.hpp"
#include "veloxquant/safetensors.hpp"
#include "veloxquant/tensor.hpp"

namespace {

using vqtest::Bytes;
using vqtest::SafetensorsWriter;
namespace fs = std::filesystem;

vq::SafetensorsFile parse(const Bytes& b) {
  return vq::SafetensorsFile::parse(
      vq::MappedFile::from_bytes(b.data(), b.size(), "t.safetensors"));
}
std::string refusal(const Bytes& b) {
  try {
    parse(b);
  } catch (const vq::FormatError& e) {
    return e.what();
  }
  return "<accepted>";
}

Bytes halves(const std::vector<float>& v, bool bf16) {
  Bytes b;
  for (float f : v) {
    uint16_t h;
    if (bf16) {
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      h = static_cast<uint16_t>(bits >> 16);
    } else {
      h = vq::fp32_to_fp16(f);
    }
    b.push_back(static_cast<uint8_t>(h & 0xFF));
    b.push_back(static_cast<uint8_t>(h >> 8));
  }
  return b;
}

SafetensorsWriter sample() {
  SafetensorsWriter w;
  w.add_f32("a", {2, 3}, {1, 2, 3, 4, 5, 6});
  w.add("b", "F16", {4}, halves({0.5f, -1.0f, 2.0f, 1024.0f}, false));
  w.add("c", "BF16", {2, 1}, halves({3.0f, -0.125f}, true));
  w.header["__metadata__"] = {{"format", "pt"}};
  return w;
}

TEST(Safetensors, ReadsF32F16Bf16AndMetadata) {
  const vq::SafetensorsFile f = parse(sample().build());
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const auto* a = f.find_tensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.to_float(*a), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(f.to_float(*f.find_tensor("b")), (std::vector<float>{0.5f, -1.0f, 2.0f, 1024.0f}));
  EXPECT_EQ(f.to_float(*f.find_tensor("c")), (std::vector<float>{3.0f, -0.125f}));
  EXPECT_EQ(f.find_tensor("zzz"), nullptr);
}

TEST(Safetensors, EveryTruncationIsRefused) {
  const Bytes b = sample().build();
  for (size_t cut = 0; cut < b.size(); ++cut)
    ASSERT_NE(refusal(Bytes(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(cut))), "<accepted>")
        << cut;
}

TEST(Safetensors, HostileHeadersAreRefusedNamingTheTensor) {
  {
    Bytes b = sample().build();
    const uint64_t n = b.size();  // header "larger than the file"
    std::memcpy(b.data(), &n, 8);
    EXPECT_NE(refusal(b).find("larger than the rest of the file"), std::string::npos);
  }
  {
    Bytes b = {4, 0, 0, 0, 0, 0, 0, 0, '{', '"', 'a', ' '};
    EXPECT_NE(refusal(b).find("not valid JSON"), std::string::npos);
  }
  {
    // one tensor named twice: a plain JSON parse keeps the second entry and drops the first
    const std::string h = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
    Bytes b(8);
    const uint64_t n = h.size();
    std::memcpy(b.data(), &n, 8);
    b.insert(b.end(), h.begin(), h.end());
    b.resize(b.size() + 8, 0);
    EXPECT_NE(refusal(b).find("safetensors header names 'a' twice in one object"),
              std::string::npos)
        << refusal(b);
  }
  auto edited = [](auto fn) {
    SafetensorsWriter w = sample();
    fn(w.header);
    return refusal(w.build());
  };
  EXPECT_NE(edited([](auto& h) {
              h["a"]["dtype"] = "I64";
            }).find("tensor a: dtype I64 is not supported (supported: F32, F16, BF16)"),
            std::string::npos);
  EXPECT_NE(edited([](auto& h) {
              h["a"]["data_offsets"] = {0, 1000};
            }).find("past the data region"),
            std::string::npos);
  EXPECT_NE(edited([](auto& h) {
              h["a"]["data_offsets"] = {4, 28};
            }).find("overlap"),
            std::string::npos);
  EXPECT_NE(edited([](auto& h) {
              h["a"]["data_offsets"] = {8, 4};
            }).find("end before they begin"),
            std::string::npos);
  EXPECT_NE(edited([](auto& h) { h["a"]["shape"] = {2, 2}; }).find("needs 16"), std::string::npos);
  EXPECT_NE(edited([](auto& h) {
              h["a"]["shape"] = {-1, 3};
            }).find("tensor a shape[0]"),
            std::string::npos);
  EXPECT_NE(edited([](auto& h) {
              h["a"]["shape"] = {uint64_t{1} << 40, uint64_t{1} << 40};
            }).find("shape overflows"),
            std::string::npos);
  EXPECT_NE(edited([](auto& h) { h["a"].erase("dtype"); }).find("tensor a: dtype missing"),
            std::string::npos);
  EXPECT_NE(edited([](auto& h) {
              h["__metadata__"] = {{"x", 1}};
            }).find("not a string"),
            std::string::npos);
}

struct TempDir {
  fs::path p;
  explicit TempDir(const std::string& tag)
      : p(fs::temp_directory_path() / ("vq_st_" + std::to_string(::getpid()) + tag)) {
    fs::create_directories(p);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(p, ec);
  }
  void write(const std::string& name, const Bytes& b) const {
    std::ofstream f(p / name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  void write(const std::string& name, const std::string& s) const {
    std::ofstream f(p / name, std::ios::binary);
    f << s;
  }
};

TEST(Safetensors, ShardedIndex) {
  TempDir d("_shard");
  SafetensorsWriter s1, s2;
  s1.add_f32("x", {2}, {1, 2});
  s2.add_f32("y", {1}, {3});
  d.write("model-00001-of-00002.safetensors", s1.build());
  d.write("model-00002-of-00002.safetensors", s2.build());
  nlohmann::json idx = {
      {"metadata", {{"total_size", 12}}},
      {"weight_map",
       {{"x", "model-00001-of-00002.safetensors"}, {"y", "model-00002-of-00002.safetensors"}}}};
  d.write("model.safetensors.index.json", idx.dump());
  const vq::SafetensorsModel m = vq::SafetensorsModel::open(d.p.string());
  EXPECT_EQ(m.shards().size(), 2u);
  EXPECT_EQ(m.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(m.to_float("y"), (std::vector<float>{3}));
  // The files open() reads: the index's shards, not every .safetensors beside them (a
  // whole-model copy some checkpoints also ship is left out).
  SafetensorsWriter whole;
  whole.add_f32("x", {2}, {1, 2});
  d.write("consolidated.safetensors", whole.build());
  EXPECT_EQ(vq::SafetensorsModel::files(d.p.string()),
            (std::vector<std::string>{(d.p / "model-00001-of-00002.safetensors").string(),
                                      (d.p / "model-00002-of-00002.safetensors").string()}));
  // Read into memory instead of mapped: every shard, the same values.
  const vq::SafetensorsModel mc = vq::SafetensorsModel::open(d.p.string(), vq::FileLoad::Copy);
  ASSERT_EQ(mc.shards().size(), 2u);
  EXPECT_EQ(mc.to_float("x"), (std::vector<float>{1, 2}));
  EXPECT_EQ(mc.to_float("y"), (std::vector<float>{3}));
  EXPECT_EQ(m.total_bytes(), 12u);
  EXPECT_THROW(m.tensor("z"), vq::FormatError);

  // Lies in the index: a tensor its shard lacks, a path out of the directory, a tensor in two
  // shards.
  idx["weight_map"]["z"] = "model-00001-of-00002.safetensors";
  d.write("model.safetensors.index.json", idx.dump());
  try {
    vq::SafetensorsModel::open(d.p.string());
    ADD_FAILURE() << "accepted";
  } catch (const vq::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor z is listed in model-00001-of-00002.safetensors"),
              std::string::npos)
        << e.what();
  }
  idx["weight_map"].erase("z");
  idx["weight_map"]["y"] = "../model-00002-of-00002.safetensors";
  d.write("model.safetensors.index.json", idx.dump());
  EXPECT_THROW(vq::SafetensorsModel::open(d.p.string()), vq::FormatError);
  SafetensorsWriter dup;
  dup.add_f32("x", {1}, {9});
  dup.add_f32("y", {1}, {3});
  d.write("model-00002-of-00002.safetensors", dup.build());
  idx["weight_map"]["y"] = "model-00002-of-00002.safetensors";
  d.write("model.safetensors.index.json", idx.dump());
  try {
    vq::SafetensorsModel::open(d.p.string());
    ADD_FAILURE() << "accepted";
  } catch (const vq::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor x is in two shards"), std::string::npos)
        << e.what();
  }
}

TEST(HfConfig, LlamaWithLlama3RopeScaling) {
  const std::string j =
      R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":2048,
    "num_hidden_layers":16,"num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":8192,
    "vocab_size":128256,"max_position_embeddings":131072,"rope_theta":500000.0,"rms_norm_eps":1e-05,
    "tie_word_embeddings":true,"bos_token_id":128000,"eos_token_id":[128001,128008,128009],
    "rope_scaling":{"factor":32.0,"high_freq_factor":4.0,"low_freq_factor":1.0,
    "original_max_position_embeddings":8192,"rope_type":"llama3"},"torch_dtype":"bfloat16"})";
  const vq::HfModelConfig c = vq::HfModelConfig::parse(j);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_hidden_layers, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
}

TEST(HfConfig, Qwen2HasBiasesAndMistralDefaults) {
  const vq::HfModelConfig q = vq::HfModelConfig::parse(
      R"({"model_type":"qwen2","hidden_size":896,"num_hidden_layers":24,"num_attention_heads":14,
      "num_key_value_heads":2,"intermediate_size":4864,"vocab_size":151936,"rope_theta":1000000.0,
      "tie_word_embeddings":true,"rms_norm_eps":1e-06})");
  EXPECT_TRUE(q.attention_bias);
  EXPECT_EQ(q.head_dim, 64);
  const vq::HfModelConfig m = vq::HfModelConfig::parse(
      R"({"model_type":"mistral","hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,
      "intermediate_size":14336,"vocab_size":32000,"sliding_window":4096,"head_dim":128})");
  EXPECT_EQ(m.num_key_value_heads, 32);
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_EQ(m.rope_theta, 10000.0);
  EXPECT_FALSE(m.tie_word_embeddings);
}

TEST(HfConfig, BadConfigsAreRefusedNamingTheField) {
  auto msg = [](const std::string& j) {
    try {
      vq::HfModelConfig::parse(j);
    } catch (const vq::FormatError& e) {
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  const std::string base =
      R"("hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":100)";
  EXPECT_NE(msg(R"({"model_type":"gpt_neox",)" + base + "}")
                .find("model_type gpt_neox is not supported (supported: llama, mistral, qwen2)"),
            std::string::npos);
  EXPECT_NE(msg(R"({"model_type":"llama","num_key_value_heads":3,)" + base + "}")
                .find("num_key_value_heads = 3 does not divide"),
            std::string::npos);
  EXPECT_NE(msg(R"({"model_type":"llama","hidden_size":64,"num_attention_heads":4})")
                .find("num_hidden_layers is missing"),
            std::string::npos);
  EXPECT_NE(
      msg(R"({"model_type":"llama","num_hidden_layers":2,"hidden_size":-5,"num_attention_heads":4,"intermediate_size":1,"vocab_size":1})")
          .find("hidden_size = -5 outside"),
      std::string::npos);
  EXPECT_NE(msg(R"({"model_type":"llama","rope_scaling":{"type":"yarn","factor":4},)" + base + "}")
                .find("rope_scaling type 'yarn'"),
            std::string::npos);
  EXPECT_NE(msg("[1,2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(msg("{").find("not valid JSON"), std::string::npos);
}

}  // namespace

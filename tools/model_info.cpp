// `veloxquant info MODEL` for model files: a .gguf, a Hugging Face directory (config.json +
// safetensors), or a single .safetensors. Prints architecture, shapes, tensor types, tokenizer,
// context length and bytes; --json writes the same.
#include "model_info.hpp"

#include <filesystem>
#include <fstream>
#include <map>

#include "veloxquant/errors.hpp"
#include "veloxquant/gguf.hpp"
#include "veloxquant/hf_config.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/safetensors.hpp"
#include "veloxquant/tokenizers.hpp"

namespace vqcli {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string tokenizer_line(const std::string& path) {
  try {
    return vq::load_tokenizer(path)->description();
  } catch (const vq::Error& e) {
    return std::string("none usable (") + e.what() + ")";
  }
}

nlohmann::json gguf_info(const std::string& path) {
  const vq::GgufFile g = vq::GgufFile::open(path);
  const std::string arch = g.architecture();
  auto num = [&](const std::string& k) -> nlohmann::json {
    const vq::GgufValue* v = g.find(arch + "." + k);
    if (!v) return nullptr;
    if (v->is_integer()) return v->as_int(k);
    if (v->is_float()) return v->f;
    return v->describe();
  };
  nlohmann::json cfg = {{"context_length", num("context_length")},
                        {"embedding_length", num("embedding_length")},
                        {"block_count", num("block_count")},
                        {"feed_forward_length", num("feed_forward_length")},
                        {"head_count", num("attention.head_count")},
                        {"head_count_kv", num("attention.head_count_kv")},
                        {"rope_freq_base", num("rope.freq_base")},
                        {"rms_norm_eps", num("attention.layer_norm_rms_epsilon")},
                        {"sliding_window", num("attention.sliding_window")},
                        {"vocab_size", num("vocab_size")}};
  nlohmann::json tensors = nlohmann::json::array();
  std::map<std::string, std::pair<int64_t, uint64_t>> by_type;
  uint64_t bytes = 0;
  int64_t params = 0;
  for (const vq::GgufTensorInfo& t : g.tensors()) {
    const std::string ty = vq::ggml_type_name(static_cast<uint32_t>(t.type));
    tensors.push_back({{"name", t.name}, {"type", ty}, {"shape", t.shape()}, {"bytes", t.bytes}});
    by_type[ty].first += 1;
    by_type[ty].second += t.bytes;
    bytes += t.bytes;
    params += t.numel();
  }
  nlohmann::json types = nlohmann::json::object();
  for (const auto& [k, v] : by_type) types[k] = {{"tensors", v.first}, {"bytes", v.second}};
  return {{"file", path},
          {"format", "gguf v" + std::to_string(g.version())},
          {"architecture", arch.empty() ? nlohmann::json(nullptr) : nlohmann::json(arch)},
          {"name", g.get_string("general.name", "")},
          {"config", cfg},
          {"tensor_count", g.tensors().size()},
          {"metadata_count", g.metadata().size()},
          {"parameters", params},
          {"tensor_bytes", bytes},
          {"file_bytes", g.file_bytes()},
          {"bits_per_weight",
           params > 0 ? 8.0 * static_cast<double>(bytes) / static_cast<double>(params) : 0.0},
          {"types", types},
          {"tokenizer", tokenizer_line(path)},
          {"tensors", tensors}};
}

nlohmann::json hf_info(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  nlohmann::json j = {{"file", path}, {"format", "safetensors"}};
  if (fs::is_directory(path, ec)) {
    const vq::HfModelConfig c = vq::HfModelConfig::load(path);
    j["architecture"] = c.model_type;
    j["config"] = {{"context_length", c.max_position_embeddings},
                   {"hidden_size", c.hidden_size},
                   {"num_hidden_layers", c.num_hidden_layers},
                   {"num_attention_heads", c.num_attention_heads},
                   {"num_key_value_heads", c.num_key_value_heads},
                   {"head_dim", c.head_dim},
                   {"intermediate_size", c.intermediate_size},
                   {"vocab_size", c.vocab_size},
                   {"rope_theta", c.rope_theta},
                   {"rope_scaling", c.rope_scaling.type},
                   {"rms_norm_eps", c.rms_norm_eps},
                   {"tie_word_embeddings", c.tie_word_embeddings},
                   {"attention_bias", c.attention_bias}};
    if (c.sliding_window > 0) j["config"]["sliding_window"] = c.sliding_window;
    j["tokenizer"] = tokenizer_line(path);
  }
  const vq::SafetensorsModel m = vq::SafetensorsModel::open(path);
  nlohmann::json tensors = nlohmann::json::array();
  std::map<std::string, std::pair<int64_t, uint64_t>> by_type;
  int64_t params = 0;
  for (const std::string& n : m.names()) {
    const vq::SafetensorsTensor& t = m.tensor(n);
    tensors.push_back({{"name", n},
                       {"type", vq::st_dtype_name(t.dtype)},
                       {"shape", t.shape},
                       {"bytes", t.bytes}});
    by_type[vq::st_dtype_name(t.dtype)].first += 1;
    by_type[vq::st_dtype_name(t.dtype)].second += t.bytes;
    params += t.numel();
  }
  nlohmann::json types = nlohmann::json::object();
  for (const auto& [k, v] : by_type) types[k] = {{"tensors", v.first}, {"bytes", v.second}};
  j["shards"] = m.shards().size();
  j["tensor_count"] = tensors.size();
  j["parameters"] = params;
  j["tensor_bytes"] = m.total_bytes();
  j["types"] = types;
  j["tensors"] = tensors;
  return j;
}

}  // namespace

bool is_model_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return true;
  for (const char* suf : {".gguf", ".safetensors", ".safetensors.index.json"}) {
    const size_t n = std::char_traits<char>::length(suf);
    if (path.size() >= n && path.compare(path.size() - n, n, suf) == 0) return true;
  }
  return false;
}

void print_model_info(const std::string& path, const std::string& json_path, bool summary) {
  std::error_code ec;
  const bool gguf = path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
  nlohmann::json j = gguf ? gguf_info(path) : hf_info(path);
  if (json_path != "-") {
    std::printf("file            %s (%s)\n", path.c_str(), j["format"].get<std::string>().c_str());
    std::printf("architecture    %s\n", j["architecture"].is_string()
                                            ? j["architecture"].get<std::string>().c_str()
                                            : "(none)");
    if (j.contains("config"))
      for (auto it = j["config"].begin(); it != j["config"].end(); ++it)
        if (!it.value().is_null())
          std::printf("  %-22s %s\n", it.key().c_str(), it.value().dump().c_str());
    if (j.contains("tokenizer"))
      std::printf("tokenizer       %s\n", j["tokenizer"].get<std::string>().c_str());
    std::printf("tensors         %zu, %lld parameters, %llu bytes", j["tensors"].size(),
                static_cast<long long>(j["parameters"].get<int64_t>()),
                static_cast<unsigned long long>(j["tensor_bytes"].get<uint64_t>()));
    if (j.contains("bits_per_weight"))
      std::printf(" (%.2f bits/weight)", j["bits_per_weight"].get<double>());
    std::printf("\n");
    for (auto it = j["types"].begin(); it != j["types"].end(); ++it)
      std::printf("  %-6s %lld tensors, %llu bytes\n", it.key().c_str(),
                  static_cast<long long>(it.value()["tensors"].get<int64_t>()),
                  static_cast<unsigned long long>(it.value()["bytes"].get<uint64_t>()));
    if (!summary) {
      Table t({"tensor", "type", "shape", "bytes"});
      for (const auto& e : j["tensors"])
        t.add({e["name"].get<std::string>(), e["type"].get<std::string>(),
               shape_str(e["shape"].get<std::vector<int64_t>>()),
               std::to_string(e["bytes"].get<uint64_t>())});
      std::printf("\n");
      t.print();
    }
  }
  if (summary) j.erase("tensors");
  if (!json_path.empty()) write_json(json_path, j);
}

// The seven int32 of a llama2.c header, or false when the file is shorter.
static bool read_header(const std::string& path, int32_t h[7], uint64_t& size) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return false;
  size = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  f.read(reinterpret_cast<char*>(h), 28);
  return f.gcount() == 28;
}

// True when `path` is a llama2.c checkpoint: its header is a valid config whose weights take
// exactly the file's size (a tokenizer.bin never does).
bool is_llama2c_checkpoint(const std::string& path) {
  int32_t h[7];
  uint64_t size = 0;
  if (!read_header(path, h, size)) return false;
  const vq::ModelConfig c = vq::ModelConfig::from_llama2c_header(h);
  try {
    c.validate();
    return static_cast<uint64_t>(c.file_bytes()) == size;
  } catch (const vq::Error&) {
    return false;
  }
}

int64_t checkpoint_vocab(const std::string& path) {
  int32_t h[7];
  uint64_t size = 0;
  read_header(path, h, size);
  return vq::ModelConfig::from_llama2c_header(h).vocab_size;
}

void print_llama2c_info(const std::string& path, const std::string& json_path) {
  int32_t h[7];
  uint64_t size = 0;
  VQ_CHECK(read_header(path, h, size), vq::FormatError, path, ": shorter than a llama2.c header");
  const vq::ModelConfig c = vq::ModelConfig::from_llama2c_header(h);
  c.validate();
  nlohmann::json j{{"file", path},
                   {"format", "llama2.c checkpoint"},
                   {"bytes", size},
                   {"dim", c.dim},
                   {"hidden_dim", c.hidden_dim},
                   {"n_layers", c.n_layers},
                   {"n_heads", c.n_heads},
                   {"n_kv_heads", c.n_kv_heads},
                   {"head_dim", c.head_dim()},
                   {"vocab_size", c.vocab_size},
                   {"shared_classifier", c.shared_classifier},
                   {"context_length", c.seq_len}};
  if (json_path != "-") {
    std::printf("%s: llama2.c checkpoint, %llu bytes (fp32 weights, no tokenizer or metadata)\n",
                path.c_str(), static_cast<unsigned long long>(size));
    std::printf(
        "dim %lld, hidden %lld, %lld layers, %lld/%lld heads (head_dim %lld), vocab %lld "
        "(%s), context %lld\n",
        static_cast<long long>(c.dim), static_cast<long long>(c.hidden_dim),
        static_cast<long long>(c.n_layers), static_cast<long long>(c.n_heads),
        static_cast<long long>(c.n_kv_heads), static_cast<long long>(c.head_dim()),
        static_cast<long long>(c.vocab_size),
        c.shared_classifier ? "shared classifier" : "separate classifier",
        static_cast<long long>(c.seq_len));
  }
  if (!json_path.empty()) write_json(json_path, j);
}

}  // namespace vqcli

// config.json -> HfModelConfig.
#include "veloxquant/hf_config.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "veloxquant/errors.hpp"
#include "veloxquant/mapped_file.hpp"

namespace vq {
namespace {

using nlohmann::json;

int64_t get_int(const json& j, const char* key, const std::string& src, int64_t lo, int64_t hi,
                bool required, int64_t fallback = 0) {
  if (!j.contains(key) || j[key].is_null()) {
    VQ_CHECK(!required, FormatError, src, ": ", key, " is missing");
    return fallback;
  }
  const json& v = j[key];
  VQ_CHECK(v.is_number_integer(), FormatError, src, ": ", key, " is ", v.dump(),
           ", expected an integer");
  VQ_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(hi), FormatError,
           src, ": ", key, " = ", v.dump(), " is above the limit ", hi);
  const int64_t x = v.get<int64_t>();
  VQ_CHECK(x >= lo && x <= hi, FormatError, src, ": ", key, " = ", x, " outside [", lo, ", ", hi,
           "]");
  return x;
}

double get_num(const json& j, const char* key, const std::string& src, double lo, double hi,
               double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const json& v = j[key];
  VQ_CHECK(v.is_number(), FormatError, src, ": ", key, " is ", v.dump(), ", expected a number");
  const double x = v.get<double>();
  VQ_CHECK(x >= lo && x <= hi, FormatError, src, ": ", key, " = ", x, " outside [", lo, ", ", hi,
           "]");
  return x;
}

bool get_bool(const json& j, const char* key, const std::string& src, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  VQ_CHECK(j[key].is_boolean(), FormatError, src, ": ", key, " is ", j[key].dump(),
           ", expected true/false");
  return j[key].get<bool>();
}

std::vector<int64_t> get_ids(const json& j, const char* key, const std::string& src) {
  std::vector<int64_t> out;
  if (!j.contains(key) || j[key].is_null()) return out;
  const json& v = j[key];
  auto one = [&](const json& e) {
    VQ_CHECK(
        e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() < (int64_t{1} << 31),
        FormatError, src, ": ", key, " holds ", e.dump(), ", expected a token id");
    out.push_back(e.get<int64_t>());
  };
  if (v.is_array()) {
    VQ_CHECK(v.size() <= 1024, FormatError, src, ": ", key, " lists ", v.size(),
             " ids (limit 1024)");
    for (const json& e : v) one(e);
  } else {
    one(v);
  }
  return out;
}

}  // namespace

std::string HfModelConfig::supported_model_types() {
  return "llama, mistral, qwen2";
}

HfModelConfig HfModelConfig::parse(const std::string& text, const std::string& src) {
  json j = json::parse(text, nullptr, false);
  VQ_CHECK(!j.is_discarded(), FormatError, src, ": not valid JSON");
  VQ_CHECK(j.is_object(), FormatError, src, ": not a JSON object");
  HfModelConfig c;
  VQ_CHECK(j.contains("model_type") && j["model_type"].is_string(), FormatError, src,
           ": model_type missing or not a string");
  c.model_type = j["model_type"].get<std::string>();
  VQ_CHECK(c.model_type == "llama" || c.model_type == "mistral" || c.model_type == "qwen2",
           FormatError, src, ": model_type ", c.model_type,
           " is not supported (supported: ", supported_model_types(), ")");
  if (j.contains("architectures") && j["architectures"].is_array())
    for (const json& a : j["architectures"])
      if (a.is_string()) c.architectures.push_back(a.get<std::string>());

  constexpr int64_t kMaxWidth = int64_t{1} << 20;
  c.hidden_size = get_int(j, "hidden_size", src, 1, kMaxWidth, true);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", src, 1, 4096, true);
  c.num_attention_heads = get_int(j, "num_attention_heads", src, 1, 65536, true);
  c.num_key_value_heads =
      get_int(j, "num_key_value_heads", src, 1, 65536, false, c.num_attention_heads);
  c.intermediate_size = get_int(j, "intermediate_size", src, 1, int64_t{1} << 24, true);
  c.vocab_size = get_int(j, "vocab_size", src, 1, int64_t{1} << 24, true);
  c.max_position_embeddings =
      get_int(j, "max_position_embeddings", src, 1, int64_t{1} << 26, false, 0);
  VQ_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, FormatError, src,
           ": num_key_value_heads = ", c.num_key_value_heads,
           " does not divide num_attention_heads = ", c.num_attention_heads);
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    c.head_dim = get_int(j, "head_dim", src, 1, 65536, true);
  } else {
    VQ_CHECK(c.hidden_size % c.num_attention_heads == 0, FormatError, src,
             ": num_attention_heads = ", c.num_attention_heads,
             " does not divide hidden_size = ", c.hidden_size, " (and head_dim is not given)");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  VQ_CHECK(c.head_dim % 2 == 0, FormatError, src, ": head_dim = ", c.head_dim,
           " is odd (RoPE rotates pairs)");
  c.rope_theta = get_num(j, "rope_theta", src, 1.0, 1e12, 10000.0);
  c.rms_norm_eps = get_num(j, "rms_norm_eps", src, 0.0, 1.0, 1e-6);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", src, false);
  c.attention_bias = c.model_type == "qwen2" ? true : get_bool(j, "attention_bias", src, false);
  if (c.model_type == "mistral")
    c.sliding_window = get_int(j, "sliding_window", src, 0, int64_t{1} << 26, false, 0);
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const json& r = j["rope_scaling"];
    VQ_CHECK(r.is_object(), FormatError, src, ": rope_scaling is not an object");
    std::string type;
    if (r.contains("rope_type") && r["rope_type"].is_string())
      type = r["rope_type"].get<std::string>();
    else if (r.contains("type") && r["type"].is_string())
      type = r["type"].get<std::string>();
    VQ_CHECK(type == "llama3", FormatError, src, ": rope_scaling type '", type,
             "' is not supported (supported: llama3, or no rope_scaling)");
    c.rope_scaling.type = type;
    c.rope_scaling.factor = get_num(r, "factor", src, 1.0, 1e6, 1.0);
    c.rope_scaling.low_freq_factor = get_num(r, "low_freq_factor", src, 1e-6, 1e6, 1.0);
    c.rope_scaling.high_freq_factor = get_num(r, "high_freq_factor", src, 1e-6, 1e6, 4.0);
    VQ_CHECK(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor, FormatError, src,
             ": rope_scaling high_freq_factor ", c.rope_scaling.high_freq_factor,
             " must exceed low_freq_factor ", c.rope_scaling.low_freq_factor);
    c.rope_scaling.original_max_position_embeddings =
        get_int(r, "original_max_position_embeddings", src, 1, int64_t{1} << 26, false, 8192);
  }
  c.bos_token_ids = get_ids(j, "bos_token_id", src);
  c.eos_token_ids = get_ids(j, "eos_token_id", src);
  if (j.contains("torch_dtype") && j["torch_dtype"].is_string())
    c.torch_dtype = j["torch_dtype"].get<std::string>();
  return c;
}

HfModelConfig HfModelConfig::load(const std::string& path) {
  std::filesystem::path p(path);
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) p /= "config.json";
  auto f = MappedFile::open(p.string());
  VQ_CHECK(f->size() <= (16u << 20), FormatError, p.string(), ": ", f->size(),
           " bytes, above the 16 MB limit for a config.json");
  return parse(
      std::string(reinterpret_cast<const char*>(f->data()), static_cast<size_t>(f->size())),
      p.string());
}

}  // namespace vq

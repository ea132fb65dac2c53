// Hugging Face config.json of Llama-family models (model_type llama, mistral, qwen2) parsed into
// one struct. Every size is checked (positive, bounded, heads dividing the width, KV heads
// dividing the heads); an unknown model_type is refused by name with the supported list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vq {

struct HfRopeScaling {
  std::string type;  ///< "" (none) or "llama3"; other types are refused
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct HfModelConfig {
  std::string model_type;                  ///< llama | mistral | qwen2
  std::vector<std::string> architectures;  ///< e.g. LlamaForCausalLM
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  ///< = num_attention_heads when absent
  int64_t head_dim = 0;             ///< = hidden_size / num_attention_heads when absent
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;  ///< 0 when absent
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  ///< q/k/v biases (always true for qwen2)
  int64_t sliding_window = 0;   ///< mistral; 0 = none
  HfRopeScaling rope_scaling;
  std::vector<int64_t> bos_token_ids, eos_token_ids;
  std::string torch_dtype;

  /// Parse config.json text; `source` names it in errors.
  static HfModelConfig parse(const std::string& json_text,
                             const std::string& source = "config.json");
  /// Read and parse a config.json file (or the config.json inside a directory).
  static HfModelConfig load(const std::string& path);
  /// "llama, mistral, qwen2".
  static std::string supported_model_types();
};

}  // namespace vq

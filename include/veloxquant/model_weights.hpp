// One loader API over GGUF files and Hugging Face safetensors checkpoints, for the inference
// engine: the architecture's hyper-parameters, and every weight by a canonical (GGUF-style) name
// with its stored type, row-major shape, raw bytes and a dequantize-to-fp32 routine. Weights stay
// in the memory map (or the file's copy in memory, FileLoad::Copy) in their stored type; nothing
// is converted until asked.
//
// Canonical names (llama.cpp's): token_embd.weight, output_norm.weight, output.weight (absent when
// tied), blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
// ffn_down}.weight and, for qwen2, blk.N.attn_{q,k,v}.bias. Hugging Face names are mapped onto
// them (model.layers.N.self_attn.q_proj.weight -> blk.N.attn_q.weight, ...).
//
// RoPE layout: llama.cpp's converter permutes Llama q/k rows so that GGUF "llama" rotates
// adjacent pairs (as llama2.c does); GGUF "qwen2" and every Hugging Face checkpoint keep the
// half-split (rotate-half / NeoX) layout. `rope_layout` says which one the stored q/k rows use.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "veloxquant/gguf.hpp"
#include "veloxquant/hf_config.hpp"
#include "veloxquant/mapped_file.hpp"

namespace vq {

enum class RopeLayout { AdjacentPairs, HalfSplit };

struct ArchConfig {
  std::string architecture;  ///< llama | qwen2 (Mistral, SmolLM, TinyLlama are llama)
  int64_t dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, hidden_dim = 0;
  int64_t vocab_size = 0, context_length = 0;
  double rope_theta = 10000.0, rms_norm_eps = 1e-5;
  HfRopeScaling rope_scaling;  ///< from config.json; GGUF files carry rope_freqs.weight instead
  bool tied_output = false;    ///< no output.weight: logits use token_embd.weight
  bool qkv_bias = false;
  RopeLayout rope_layout = RopeLayout::AdjacentPairs;
  /// Mistral's sliding-window attention: a token attends to the last sliding_window positions
  /// (itself included); 0 = the whole context. config.json sliding_window (model_type mistral),
  /// GGUF <arch>.attention.sliding_window.
  int64_t sliding_window = 0;
};

struct WeightTensor {
  std::string name;               ///< canonical name
  std::string source;             ///< name in the file
  GgmlType type = GgmlType::F32;  ///< F32 / F16 / BF16 for safetensors
  std::vector<int64_t> shape;     ///< row-major: [rows, row length]
  const uint8_t* data = nullptr;  ///< inside the memory map (or the file's copy)
  uint64_t bytes = 0;
  int64_t numel() const;
  /// All values as fp32.
  std::vector<float> dequantize() const;
};

class ModelWeights {
 public:
  /// A .gguf file, or a Hugging Face directory (config.json + model.safetensors or an index).
  /// FormatError for an unsupported architecture (named, with the supported list), a missing
  /// tensor or one of the wrong shape (named, with both shapes), or any reader refusal.
  /// `how`: the files are memory-mapped (default) or read into memory on huge pages
  /// (veloxquant/mapped_file.hpp).
  static ModelWeights open(const std::string& path, FileLoad how = FileLoad::Map);
  /// Weights made in memory (Model::random_typed): `tensors` by canonical name, their bytes kept
  /// alive by `owner`. Every tensor open() requires for `config` must be present with its shape
  /// (FormatError naming it otherwise); `label` stands in for the path in messages.
  static ModelWeights from_memory(const ArchConfig& config, std::vector<WeightTensor> tensors,
                                  std::shared_ptr<const void> owner, const std::string& label);
  /// "llama, qwen2" (GGUF) / "llama, mistral, qwen2" (config.json).
  static std::string supported_architectures();

  const ArchConfig& config() const { return config_; }
  const std::string& path() const { return path_; }
  /// nullptr when absent.
  const WeightTensor* find(const std::string& canonical) const;
  /// Required: FormatError naming it when absent.
  const WeightTensor& get(const std::string& canonical) const;
  std::vector<std::string> names() const;
  uint64_t total_bytes() const;

 private:
  struct Holder;
  std::shared_ptr<Holder> holder_;  // keeps the GGUF / safetensors maps alive
  ArchConfig config_;
  std::string path_;
  std::map<std::string, WeightTensor> tensors_;
};

}  // namespace vq

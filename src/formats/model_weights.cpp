// ModelWeights over GGUF and Hugging Face safetensors (see the header).
#include "veloxquant/model_weights.hpp"

#include <filesystem>
#include <regex>

#include "veloxquant/errors.hpp"
#include "veloxquant/safetensors.hpp"

namespace vq {

struct ModelWeights::Holder {
  std::unique_ptr<GgufFile> gguf;
  std::unique_ptr<SafetensorsModel> st;
  std::shared_ptr<const void> owned;  // from_memory's buffers
};

int64_t WeightTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> WeightTensor::dequantize() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  ggml_dequantize(type, data, out.data(), numel());
  return out;
}

std::string ModelWeights::supported_architectures() {
  return "llama, qwen2 (GGUF); llama, mistral, qwen2 (config.json)";
}

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// HF name -> canonical name ("" when the tensor is not one the engine uses, e.g. rotary caches).
std::string canonical_from_hf(const std::string& n) {
  static const std::regex layer(R"(model\.layers\.(\d+)\.(.+))");
  if (n == "model.embed_tokens.weight") return "token_embd.weight";
  if (n == "model.norm.weight") return "output_norm.weight";
  if (n == "lm_head.weight") return "output.weight";
  std::smatch m;
  if (!std::regex_match(n, m, layer)) return "";
  static const std::map<std::string, std::string> parts = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  auto it = parts.find(m[2].str());
  return it == parts.end() ? "" : "blk." + m[1].str() + "." + it->second;
}

GgmlType ggml_of(StDtype d) {
  switch (d) {
    case StDtype::F32:
      return GgmlType::F32;
    case StDtype::F16:
      return GgmlType::F16;
    case StDtype::BF16:
      return GgmlType::BF16;
  }
  return GgmlType::F32;
}

int64_t gguf_int(const GgufFile& g, const std::string& key, int64_t lo, int64_t hi,
                 int64_t fallback, bool required) {
  const GgufValue* v = g.find(key);
  if (!v) {
    VQ_CHECK(!required, FormatError, g.path(), ": metadata key ", key, " is missing");
    return fallback;
  }
  const int64_t x = v->as_int(key);
  VQ_CHECK(x >= lo && x <= hi, FormatError, g.path(), ": ", key, " = ", x, " outside [", lo, ", ",
           hi, "]");
  return x;
}

// Every tensor the architecture of w.config() needs, with its shape (FormatError otherwise).
void require_tensors(const ModelWeights& w, const std::string& path) {
  const ArchConfig& c = w.config();
  auto need = [&](const std::string& name, std::vector<int64_t> shape) {
    const WeightTensor* t = w.find(name);
    VQ_CHECK(t != nullptr, FormatError, path, ": tensor ", name, " is missing");
    VQ_CHECK(t->shape == shape, FormatError, path, ": tensor ", name, " (", t->source,
             ") has shape ", shape_str(t->shape), ", expected ", shape_str(shape));
  };
  const int64_t q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
  need("token_embd.weight", {c.vocab_size, c.dim});
  need("output_norm.weight", {c.dim});
  if (!c.tied_output) need("output.weight", {c.vocab_size, c.dim});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    need(b + "attn_norm.weight", {c.dim});
    need(b + "attn_q.weight", {q, c.dim});
    need(b + "attn_k.weight", {kv, c.dim});
    need(b + "attn_v.weight", {kv, c.dim});
    need(b + "attn_output.weight", {c.dim, q});
    need(b + "ffn_norm.weight", {c.dim});
    need(b + "ffn_gate.weight", {c.hidden_dim, c.dim});
    need(b + "ffn_up.weight", {c.hidden_dim, c.dim});
    need(b + "ffn_down.weight", {c.dim, c.hidden_dim});
    if (c.qkv_bias) {
      need(b + "attn_q.bias", {q});
      need(b + "attn_k.bias", {kv});
      need(b + "attn_v.bias", {kv});
    }
  }
}

}  // namespace

ModelWeights ModelWeights::open(const std::string& path, FileLoad how) {
  namespace fs = std::filesystem;
  ModelWeights w;
  w.path_ = path;
  w.holder_ = std::make_shared<Holder>();
  ArchConfig& c = w.config_;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const HfModelConfig h = HfModelConfig::load(path);
    w.holder_->st = std::make_unique<SafetensorsModel>(SafetensorsModel::open(path, how));
    c.architecture = h.model_type == "qwen2" ? "qwen2" : "llama";
    c.dim = h.hidden_size;
    c.n_layers = h.num_hidden_layers;
    c.n_heads = h.num_attention_heads;
    c.n_kv_heads = h.num_key_value_heads;
    c.head_dim = h.head_dim;
    c.hidden_dim = h.intermediate_size;
    c.vocab_size = h.vocab_size;
    c.context_length = h.max_position_embeddings;
    c.rope_theta = h.rope_theta;
    c.rms_norm_eps = h.rms_norm_eps;
    c.rope_scaling = h.rope_scaling;
    c.qkv_bias = h.attention_bias;
    c.rope_layout = RopeLayout::HalfSplit;
    c.sliding_window = h.sliding_window;
    const SafetensorsModel& st = *w.holder_->st;
    for (const std::string& n : st.names()) {
      const std::string canon = canonical_from_hf(n);
      if (canon.empty()) continue;
      const SafetensorsFile* shard = nullptr;
      const SafetensorsTensor& t = st.tensor(n, &shard);
      w.tensors_[canon] =
          WeightTensor{canon, n, ggml_of(t.dtype), t.shape, shard->tensor_data(t), t.bytes};
    }
    c.tied_output = h.tie_word_embeddings || !w.tensors_.count("output.weight");
  } else {
    w.holder_->gguf = std::make_unique<GgufFile>(GgufFile::open(path, how));
    const GgufFile& g = *w.holder_->gguf;
    const std::string arch = g.architecture();
    VQ_CHECK(arch == "llama" || arch == "qwen2", FormatError, path, ": architecture '", arch,
             "' is not supported (supported: ", supported_architectures(), ")");
    c.architecture = arch;
    const std::string p = arch + ".";
    constexpr int64_t kMax = int64_t{1} << 20;
    c.dim = gguf_int(g, p + "embedding_length", 1, kMax, 0, true);
    c.n_layers = gguf_int(g, p + "block_count", 1, 4096, 0, true);
    c.n_heads = gguf_int(g, p + "attention.head_count", 1, 65536, 0, true);
    c.n_kv_heads = gguf_int(g, p + "attention.head_count_kv", 1, 65536, c.n_heads, false);
    c.hidden_dim = gguf_int(g, p + "feed_forward_length", 1, int64_t{1} << 24, 0, true);
    c.context_length = gguf_int(g, p + "context_length", 1, int64_t{1} << 26, 0, false);
    c.head_dim = gguf_int(g, p + "attention.key_length", 1, 65536, c.dim / c.n_heads, false);
    c.rope_theta = g.get_float(p + "rope.freq_base", 10000.0);
    c.rms_norm_eps = g.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5);
    // Mistral's GGUF files have arch llama; the window is read for llama only (Qwen2's
    // use_sliding_window is off in the released models, which run without a window).
    if (arch == "llama")
      c.sliding_window = gguf_int(g, p + "attention.sliding_window", 0, int64_t{1} << 26, 0, false);
    VQ_CHECK(c.n_heads % c.n_kv_heads == 0, FormatError, path, ": head_count_kv = ", c.n_kv_heads,
             " does not divide head_count = ", c.n_heads);
    c.qkv_bias = arch == "qwen2";
    c.rope_layout = arch == "qwen2" ? RopeLayout::HalfSplit : RopeLayout::AdjacentPairs;
    for (const GgufTensorInfo& t : g.tensors())
      w.tensors_[t.name] =
          WeightTensor{t.name, t.name, t.type, t.shape(), g.tensor_data(t), t.bytes};
    const WeightTensor* emb = w.find("token_embd.weight");
    VQ_CHECK(emb != nullptr && emb->shape.size() == 2, FormatError, path,
             ": tensor token_embd.weight is missing or not 2-D");
    c.vocab_size = gguf_int(g, p + "vocab_size", 1, int64_t{1} << 24, emb->shape[0], false);
    c.tied_output = !w.tensors_.count("output.weight");
  }
  VQ_CHECK(c.head_dim % 2 == 0, FormatError, path, ": head_dim ", c.head_dim, " is odd");
  require_tensors(w, path);
  return w;
}

ModelWeights ModelWeights::from_memory(const ArchConfig& config, std::vector<WeightTensor> tensors,
                                       std::shared_ptr<const void> owner,
                                       const std::string& label) {
  ModelWeights w;
  w.path_ = label;
  w.holder_ = std::make_shared<Holder>();
  w.holder_->owned = std::move(owner);
  w.config_ = config;
  for (WeightTensor& t : tensors) {
    const std::string name = t.name;
    w.tensors_[name] = std::move(t);
  }
  VQ_CHECK(config.head_dim % 2 == 0, FormatError, label, ": head_dim ", config.head_dim, " is odd");
  require_tensors(w, label);
  return w;
}

const WeightTensor* ModelWeights::find(const std::string& canonical) const {
  auto it = tensors_.find(canonical);
  return it == tensors_.end() ? nullptr : &it->second;
}

const WeightTensor& ModelWeights::get(const std::string& canonical) const {
  const WeightTensor* t = find(canonical);
  VQ_CHECK(t != nullptr, FormatError, path_, ": tensor ", canonical, " is missing");
  return *t;
}

std::vector<std::string> ModelWeights::names() const {
  std::vector<std::string> out;
  for (const auto& [n, t] : tensors_) out.push_back(n);
  return out;
}

uint64_t ModelWeights::total_bytes() const {
  uint64_t b = 0;
  for (const auto& [n, t] : tensors_) b += t.bytes;
  return b;
}

}  // namespace vq

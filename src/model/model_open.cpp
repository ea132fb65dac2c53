// Model::open and Model over GGUF / Hugging Face weights (ModelWeights): the engine's per-layer
// views, fp32 copies of the small vectors (norms, biases), RoPE frequencies with llama3 scaling.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/safetensors.hpp"

namespace vq {

struct Model::Converted {
  ModelWeights w;
  AlignedFloats small;  // norms and biases as fp32
  std::vector<LayerTensors> layers;
  WeightMatrix emb, out;
  int64_t rms_final_at = 0;
  std::vector<double> freqs;
};

namespace {

constexpr double kPi = 3.14159265358979323846;

WeightMatrix matrix_of(const WeightTensor& t) {
  VQ_CHECK(t.shape.size() == 2, FormatError, "tensor ", t.name, " is not 2-D");
  return WeightMatrix{t.type, t.data, t.shape[0], t.shape[1]};
}

// Physical memory in bytes, or the value of $VQ_MEMORY_LIMIT (bytes) when set.
uint64_t memory_limit(std::string& what) {
  if (const char* e = std::getenv("VQ_MEMORY_LIMIT"); e && *e) {
    what = "$VQ_MEMORY_LIMIT";
    return std::strtoull(e, nullptr, 10);
  }
  what = "physical memory";
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page)
                               : UINT64_MAX;
}

// `needs`: what the bytes are for ("for its weights", "to copy its files").
void check_fits(const std::string& path, uint64_t bytes, const char* needs = "for its weights") {
  std::string what;
  const uint64_t limit = memory_limit(what);
  VQ_CHECK(bytes <= limit, InvalidArgument, "model '", path, "' needs ", bytes, " bytes ", needs,
           ", more than the ", limit, " bytes of ", what,
           ": it does not fit in memory (pick a smaller or more quantized model)");
}

// The bytes a copy of the model's files takes: a GGUF file's size, or the sizes of the
// .safetensors files SafetensorsModel::open would read.
uint64_t file_bytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::vector<std::string> files =
      fs::is_directory(path, ec) ? SafetensorsModel::files(path) : std::vector<std::string>{path};
  uint64_t total = 0;
  for (const std::string& f : files) {
    std::error_code size_ec;
    const auto n = fs::file_size(f, size_ec);
    if (!size_ec) total += static_cast<uint64_t>(n);  // (a missing one is open()'s to name)
  }
  return total;
}

bool starts_with_gguf(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char m[4] = {};
  f.read(m, 4);
  return f.gcount() == 4 && m[0] == 'G' && m[1] == 'G' && m[2] == 'U' && m[3] == 'F';
}

}  // namespace

Model Model::open(const std::string& path, FileLoad how) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec) || starts_with_gguf(path)) {
    // A copy is read whole at open: refuse what cannot fit before reading it, as the weights'
    // size is refused below once known.
    if (how == FileLoad::Copy) check_fits(path, file_bytes(path), "to copy its files");
    Model m = from_weights(ModelWeights::open(path, how));
    check_fits(path, m.weight_bytes());
    return m;
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec) check_fits(path, static_cast<uint64_t>(size));
  return load(path);
}

Model Model::from_weights(ModelWeights weights) {
  auto cv = std::make_shared<Converted>();
  cv->w = std::move(weights);
  const ArchConfig& a = cv->w.config();
  const std::string& path = cv->w.path();
  VQ_CHECK(a.n_heads * a.head_dim == a.dim, FormatError, path, ": head_dim ", a.head_dim, " x ",
           a.n_heads, " heads = ", a.n_heads * a.head_dim, " differs from the width ", a.dim,
           "; the engine needs dim = n_heads * head_dim");
  VQ_CHECK(a.context_length > 0, FormatError, path,
           ": the file gives no context length (GGUF <arch>.context_length / config.json "
           "max_position_embeddings)");
  constexpr int64_t kMaxContext = int64_t{1} << 20;
  VQ_CHECK(a.context_length <= kMaxContext, FormatError, path, ": context length ",
           a.context_length, " exceeds the engine's limit ", kMaxContext);
  VQ_CHECK(a.rms_norm_eps > 0 && a.rms_norm_eps < 1, FormatError, path, ": rms_norm_eps ",
           a.rms_norm_eps, " is outside (0, 1)");
  VQ_CHECK(a.rope_theta > 1 && std::isfinite(a.rope_theta), FormatError, path, ": rope_theta ",
           a.rope_theta, " must be finite and > 1");
  Model m;
  ModelConfig& c = m.config_;
  c.dim = a.dim;
  c.hidden_dim = a.hidden_dim;
  c.n_layers = a.n_layers;
  c.n_heads = a.n_heads;
  c.n_kv_heads = a.n_kv_heads;
  c.vocab_size = a.vocab_size;
  c.seq_len = a.context_length;
  c.shared_classifier = a.tied_output;
  c.architecture = a.architecture;
  c.rope_theta = a.rope_theta;
  c.rms_norm_eps = a.rms_norm_eps;
  c.rope_layout = a.rope_layout;
  c.sliding_window = a.sliding_window;

  // fp32 copies of every vector, placed first so the pointers below stay valid.
  const int64_t kv = c.kv_dim();
  int64_t n_small = c.dim + c.n_layers * (2 * c.dim + (a.qkv_bias ? c.dim + 2 * kv : 0));
  cv->small.resize(static_cast<size_t>(n_small));
  int64_t at = 0;
  auto vec = [&](const std::string& name, int64_t n) {
    const WeightTensor& t = cv->w.get(name);
    VQ_CHECK(t.numel() == n, FormatError, path, ": tensor ", name, " has ", t.numel(),
             " values, expected ", n);
    const std::vector<float> v = t.dequantize();
    float* dst = cv->small.data() + at;
    std::copy(v.begin(), v.end(), dst);
    at += n;
    return static_cast<const float*>(dst);
  };
  cv->rms_final_at = at;
  vec("output_norm.weight", c.dim);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    LayerTensors t;
    t.rms_att = vec(b + "attn_norm.weight", c.dim);
    t.rms_ffn = vec(b + "ffn_norm.weight", c.dim);
    if (a.qkv_bias) {
      t.bq = vec(b + "attn_q.bias", c.dim);
      t.bk = vec(b + "attn_k.bias", kv);
      t.bv = vec(b + "attn_v.bias", kv);
    }
    t.wq = matrix_of(cv->w.get(b + "attn_q.weight"));
    t.wk = matrix_of(cv->w.get(b + "attn_k.weight"));
    t.wv = matrix_of(cv->w.get(b + "attn_v.weight"));
    t.wo = matrix_of(cv->w.get(b + "attn_output.weight"));
    t.w1 = matrix_of(cv->w.get(b + "ffn_gate.weight"));
    t.w3 = matrix_of(cv->w.get(b + "ffn_up.weight"));
    t.w2 = matrix_of(cv->w.get(b + "ffn_down.weight"));
    cv->layers.push_back(t);
  }
  cv->emb = matrix_of(cv->w.get("token_embd.weight"));
  cv->out = a.tied_output ? cv->emb : matrix_of(cv->w.get("output.weight"));

  // RoPE frequencies: theta^(-2i/D), then llama3 scaling (config.json) or GGUF's per-pair
  // divisors (rope_freqs.weight, written by llama.cpp's converter for Llama 3.1+).
  const int64_t D = a.head_dim, hd2 = D / 2;
  cv->freqs.resize(static_cast<size_t>(hd2));
  for (int64_t i = 0; i < hd2; ++i)
    cv->freqs[static_cast<size_t>(i)] =
        std::pow(a.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
  if (a.rope_scaling.type == "llama3") {
    const HfRopeScaling& r = a.rope_scaling;
    const double old_ctx = static_cast<double>(r.original_max_position_embeddings);
    const double low_wavelen = old_ctx / r.low_freq_factor;
    const double high_wavelen = old_ctx / r.high_freq_factor;
    for (double& f : cv->freqs) {
      const double wavelen = 2.0 * kPi / f;
      if (wavelen < high_wavelen) continue;  // high frequencies are kept
      if (wavelen > low_wavelen) {           // low frequencies are slowed by `factor`
        f /= r.factor;
        continue;
      }
      const double smooth =
          (old_ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      f = (1.0 - smooth) * f / r.factor + smooth * f;
    }
  }
  if (const WeightTensor* rf = cv->w.find("rope_freqs.weight")) {
    VQ_CHECK(rf->numel() == hd2, FormatError, path, ": tensor rope_freqs.weight has ", rf->numel(),
             " values, expected head_dim / 2 = ", hd2);
    const std::vector<float> div = rf->dequantize();
    for (int64_t i = 0; i < hd2; ++i) {
      const float d = div[static_cast<size_t>(i)];
      VQ_CHECK(std::isfinite(d) && d > 0, FormatError, path, ": rope_freqs.weight[", i, "] = ", d,
               " is not a positive number");
      cv->freqs[static_cast<size_t>(i)] /= static_cast<double>(d);
    }
  }
  m.weights_ = std::move(cv);
  return m;
}

const ModelWeights* Model::weights() const {
  return weights_ ? &weights_->w : nullptr;
}

const float* Model::converted_rms_final() const {
  return weights_->small.data() + weights_->rms_final_at;
}

LayerTensors Model::tensors(int64_t l) const {
  VQ_CHECK(l >= 0 && l < config_.n_layers, InvalidArgument, "Model::tensors: l = ", l,
           " is outside [0, n_layers = ", config_.n_layers, ")");
  if (weights_) return weights_->layers[static_cast<size_t>(l)];
  const LayerWeights w = layer(l);
  const int64_t dim = config_.dim, kv = config_.kv_dim(), hid = config_.hidden_dim;
  LayerTensors t;
  t.rms_att = w.rms_att;
  t.rms_ffn = w.rms_ffn;
  t.wq = WeightMatrix::f32(w.wq, dim, dim);
  t.wk = WeightMatrix::f32(w.wk, kv, dim);
  t.wv = WeightMatrix::f32(w.wv, kv, dim);
  t.wo = WeightMatrix::f32(w.wo, dim, dim);
  t.w1 = WeightMatrix::f32(w.w1, hid, dim);
  t.w2 = WeightMatrix::f32(w.w2, dim, hid);
  t.w3 = WeightMatrix::f32(w.w3, hid, dim);
  return t;
}

WeightMatrix Model::embedding_matrix() const {
  if (weights_) return weights_->emb;
  return WeightMatrix::f32(token_embedding(), config_.vocab_size, config_.dim);
}

WeightMatrix Model::output_matrix() const {
  if (weights_) return weights_->out;
  return WeightMatrix::f32(classifier(), config_.vocab_size, config_.dim);
}

std::vector<double> Model::rope_frequencies() const {
  if (weights_) return weights_->freqs;
  const int64_t D = config_.head_dim();
  std::vector<double> f(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i)
    f[static_cast<size_t>(i)] =
        std::pow(config_.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
  return f;
}

uint64_t Model::weight_bytes() const {
  if (weights_) return weights_->w.total_bytes();
  return static_cast<uint64_t>(data_.size()) * sizeof(float);
}

}  // namespace vq

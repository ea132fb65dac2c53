// llama2.c "legacy" checkpoints: header of seven int32 (dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size, seq_len; negative vocab_size = unshared classifier), then fp32 tensors
// in a fixed order. The reader trusts nothing: every header field is range-checked, the file
// length must equal what the header implies, and every weight must be finite.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "model/layout.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"

namespace vq {

namespace {

constexpr int64_t kHeaderBytes = 7 * 4;

void check_field(const char* name, int64_t v, int64_t lo, int64_t hi) {
  VQ_CHECK(v >= lo && v <= hi, FormatError, "checkpoint header field ", name, " = ", v,
           " is out of range [", lo, ", ", hi, "]");
}

std::string describe(const ModelConfig& c) {
  return detail::cat("dim=", c.dim, ", hidden_dim=", c.hidden_dim, ", n_layers=", c.n_layers,
                     ", n_heads=", c.n_heads, ", n_kv_heads=", c.n_kv_heads,
                     ", vocab_size=", c.shared_classifier ? c.vocab_size : -c.vocab_size,
                     ", seq_len=", c.seq_len);
}

}  // namespace

namespace model {

std::vector<TensorSpan> checkpoint_layout(const ModelConfig& c) {
  const int64_t L = c.n_layers, D = c.dim, KV = c.kv_dim(), Hd = c.hidden_dim;
  const int64_t rope = c.seq_len * (c.head_dim() / 2);
  std::vector<TensorSpan> spans = {
      {"token_embedding", c.vocab_size * D, 1},
      {"rms_att", L * D, L},
      {"wq", L * D * D, L},
      {"wk", L * KV * D, L},
      {"wv", L * KV * D, L},
      {"wo", L * D * D, L},
      {"rms_ffn", L * D, L},
      {"w1", L * Hd * D, L},
      {"w2", L * D * Hd, L},
      {"w3", L * Hd * D, L},
      {"rms_final", D, 1},
      {"freq_cis_real", rope, 1},
      {"freq_cis_imag", rope, 1},
  };
  if (!c.shared_classifier) spans.push_back({"wcls", c.vocab_size * D, 1});
  int64_t off = 0;
  for (auto& s : spans) {
    s.offset = off;
    off += s.count;
  }
  return spans;
}

const TensorSpan& find_span(const std::vector<TensorSpan>& spans, const char* name) {
  for (const auto& s : spans)
    if (s.name == name) return s;
  VQ_THROW(Error, "internal: no tensor named ", name);
}

}  // namespace model

void ModelConfig::validate() const {
  check_field("dim", dim, 1, 1 << 16);
  check_field("hidden_dim", hidden_dim, 1, 1 << 18);
  check_field("n_layers", n_layers, 1, 1024);
  check_field("n_heads", n_heads, 1, dim);
  check_field("n_kv_heads", n_kv_heads, 1, n_heads);
  check_field("vocab_size (absolute value)", vocab_size, 1, 1 << 21);
  check_field("seq_len", seq_len, 1, 1 << 20);
  VQ_CHECK(dim % n_heads == 0, FormatError, "checkpoint header: dim = ", dim,
           " is not a multiple of n_heads = ", n_heads);
  VQ_CHECK(head_dim() % 2 == 0, FormatError,
           "checkpoint header: head_dim = dim / n_heads = ", head_dim(),
           " must be even (RoPE rotates pairs)");
  VQ_CHECK(n_heads % n_kv_heads == 0, FormatError, "checkpoint header: n_heads = ", n_heads,
           " is not a multiple of n_kv_heads = ", n_kv_heads);
}

int64_t ModelConfig::n_floats() const {
  const auto spans = model::checkpoint_layout(*this);
  return spans.back().offset + spans.back().count;
}

int64_t ModelConfig::file_bytes() const {
  return kHeaderBytes + 4 * n_floats();
}

ModelConfig ModelConfig::from_llama2c_header(const int32_t h[7]) {
  ModelConfig c;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.shared_classifier = h[5] > 0;
  c.vocab_size = h[5] < 0 ? -static_cast<int64_t>(h[5]) : h[5];
  c.seq_len = h[6];
  return c;
}

Model Model::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  VQ_CHECK(f.good(), IoError, "cannot open checkpoint '", path, "'");
  f.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(f.tellg());
  f.seekg(0, std::ios::beg);
  VQ_CHECK(size >= 0, IoError, "cannot determine the size of checkpoint '", path, "'");
  VQ_CHECK(size >= kHeaderBytes, FormatError, "checkpoint '", path, "' has ", size,
           " bytes, fewer than the ", kHeaderBytes, "-byte header");
  int32_t h[7];
  f.read(reinterpret_cast<char*>(h), sizeof h);
  VQ_CHECK(f.good(), IoError, "failed reading the header of '", path, "'");
  Model m;
  ModelConfig& c = m.config_;
  c = ModelConfig::from_llama2c_header(h);
  try {
    c.validate();
  } catch (const FormatError& e) {
    VQ_THROW(FormatError, "'", path, "': ", e.what());
  }

  const auto spans = model::checkpoint_layout(c);
  const int64_t expect = c.file_bytes();
  if (size < expect) {
    const int64_t have = (size - kHeaderBytes) / 4;  // whole floats present
    const model::TensorSpan* at = &spans.back();
    for (const auto& s : spans)
      if (have < s.offset + s.count) {
        at = &s;
        break;
      }
    VQ_THROW(FormatError, "checkpoint '", path, "' is truncated: ", size,
             " bytes, but its header (", describe(c), ") implies ", expect,
             " bytes; the data ends inside tensor '", at->name, "' after ", have - at->offset,
             " of its ", at->count, " floats");
  }
  VQ_CHECK(size == expect, FormatError, "checkpoint '", path, "' has ", size - expect,
           " bytes after its last tensor '", spans.back().name, "' (", size, " bytes, header (",
           describe(c), ") implies ", expect, "): padded file or wrong header");

  m.data_.resize(static_cast<size_t>(c.n_floats()));
  f.read(reinterpret_cast<char*>(m.data_.data()),
         static_cast<std::streamsize>(m.data_.size() * sizeof(float)));
  VQ_CHECK(f.good(), IoError, "failed reading the tensors of '", path, "'");
  for (const auto& s : spans) {
    const float* p = m.data_.data() + s.offset;
    for (int64_t i = 0; i < s.count; ++i) {
      if (!std::isfinite(p[i])) {
        const int64_t per = s.count / s.layers;
        VQ_THROW(FormatError, "checkpoint '", path, "': tensor '", s.name, "'",
                 s.layers > 1 ? detail::cat(" (layer ", i / per, ")") : std::string(),
                 " holds a non-finite value ", p[i], " at element ", i % per);
      }
    }
  }
  return m;
}

Model Model::random(const ModelConfig& config, uint64_t seed, float scale) {
  config.validate();
  Model m;
  m.config_ = config;
  m.data_.resize(static_cast<size_t>(config.n_floats()));
  Rng rng(seed);
  const auto spans = model::checkpoint_layout(config);
  const int64_t hd2 = config.head_dim() / 2;
  for (const auto& s : spans) {
    float* p = m.data_.data() + s.offset;
    const bool norm = s.name.rfind("rms", 0) == 0;
    if (s.name == "freq_cis_real" || s.name == "freq_cis_imag") {
      const bool re = s.name == "freq_cis_real";
      for (int64_t pos = 0; pos < config.seq_len; ++pos)
        for (int64_t i = 0; i < hd2; ++i) {
          const double freq = std::pow(
              10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(config.head_dim()));
          const double a = static_cast<double>(pos) * freq;
          p[pos * hd2 + i] = static_cast<float>(re ? std::cos(a) : std::sin(a));
        }
      continue;
    }
    for (int64_t i = 0; i < s.count; ++i)
      p[i] = norm ? static_cast<float>(1.0 + 0.1 * rng.normal())
                  : static_cast<float>(scale * rng.normal());
  }
  return m;
}

void Model::save(const std::string& path) const {
  std::ofstream f(path, std::ios::binary);
  VQ_CHECK(f.good(), IoError, "cannot open '", path, "' for writing");
  const ModelConfig& c = config_;
  const int32_t h[7] = {static_cast<int32_t>(c.dim),
                        static_cast<int32_t>(c.hidden_dim),
                        static_cast<int32_t>(c.n_layers),
                        static_cast<int32_t>(c.n_heads),
                        static_cast<int32_t>(c.n_kv_heads),
                        static_cast<int32_t>(c.shared_classifier ? c.vocab_size : -c.vocab_size),
                        static_cast<int32_t>(c.seq_len)};
  f.write(reinterpret_cast<const char*>(h), sizeof h);
  f.write(reinterpret_cast<const char*>(data_.data()),
          static_cast<std::streamsize>(data_.size() * sizeof(float)));
  VQ_CHECK(f.good(), IoError, "failed writing '", path, "'");
}

namespace {
void require_checkpoint(bool ok, const char* what) {
  VQ_CHECK(ok, InvalidArgument, "Model::", what,
           " is an fp32 view of a llama2.c checkpoint; this model was read from GGUF / Hugging "
           "Face weights (use tensors(), embedding_matrix(), output_matrix())");
}
}  // namespace

const float* Model::token_embedding() const {
  require_checkpoint(is_checkpoint(), "token_embedding");
  return data_.data();
}

LayerWeights Model::layer(int64_t l) const {
  require_checkpoint(is_checkpoint(), "layer");
  VQ_CHECK(l >= 0 && l < config_.n_layers, InvalidArgument, "Model::layer: l = ", l,
           " is outside [0, n_layers = ", config_.n_layers, ")");
  const auto spans = model::checkpoint_layout(config_);
  auto at = [&](const char* name) {
    const auto& s = model::find_span(spans, name);
    return data_.data() + s.offset + l * (s.count / s.layers);
  };
  LayerWeights w;
  w.rms_att = at("rms_att");
  w.wq = at("wq");
  w.wk = at("wk");
  w.wv = at("wv");
  w.wo = at("wo");
  w.rms_ffn = at("rms_ffn");
  w.w1 = at("w1");
  w.w2 = at("w2");
  w.w3 = at("w3");
  return w;
}

const float* Model::rms_final() const {
  if (!is_checkpoint()) return converted_rms_final();
  const auto spans = model::checkpoint_layout(config_);
  return data_.data() + model::find_span(spans, "rms_final").offset;
}

const float* Model::classifier() const {
  require_checkpoint(is_checkpoint(), "classifier");
  if (config_.shared_classifier) return token_embedding();
  const auto spans = model::checkpoint_layout(config_);
  return data_.data() + model::find_span(spans, "wcls").offset;
}

}  // namespace vq

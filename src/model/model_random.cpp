// Model::random_typed: random Llama weights generated and quantized in memory, row by row.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/large_buffer.hpp"
#include "core/rng.hpp"
#include "core/thread_pool.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"

namespace vq {
namespace {

struct Planned {
  std::string name;
  int64_t rows = 0, cols = 0;  // rows = 1 for a vector
  bool norm = false;           // fp32, values near 1
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0, bytes = 0;
};

constexpr uint64_t kAlign = 64;

}  // namespace

Model Model::random_typed(const ModelConfig& config, GgmlType type, uint64_t seed, float scale) {
  config.validate();
  VQ_CHECK(ggml_type_quantizable(type), InvalidArgument, "Model::random_typed: weight type ",
           ggml_type_name(static_cast<uint32_t>(type)),
           " cannot be made in memory (F32, F16, BF16, Q8_0 or Q4_K)");
  const int64_t bv = ggml_block_values(type);
  VQ_CHECK(config.dim % bv == 0 && config.hidden_dim % bv == 0, InvalidArgument,
           "Model::random_typed: dim ", config.dim, " and hidden_dim ", config.hidden_dim,
           " must be multiples of the ", ggml_type_name(static_cast<uint32_t>(type)), " block of ",
           bv, " values");
  VQ_CHECK(std::isfinite(scale) && scale > 0, InvalidArgument, "Model::random_typed: scale ", scale,
           " must be finite and positive");

  ArchConfig a;
  a.architecture = "llama";
  a.dim = config.dim;
  a.n_layers = config.n_layers;
  a.n_heads = config.n_heads;
  a.n_kv_heads = config.n_kv_heads;
  a.head_dim = config.head_dim();
  a.hidden_dim = config.hidden_dim;
  a.vocab_size = config.vocab_size;
  a.context_length = config.seq_len;
  a.rope_theta = config.rope_theta;
  a.rms_norm_eps = config.rms_norm_eps;
  a.tied_output = config.shared_classifier;
  a.rope_layout = RopeLayout::AdjacentPairs;

  // Every tensor with its place in one buffer, each at a multiple of 64 bytes.
  std::vector<Planned> plan;
  const int64_t dim = config.dim, kv = config.kv_dim(), hid = config.hidden_dim;
  auto add = [&](std::string name, int64_t rows, int64_t cols, bool norm) {
    Planned p{std::move(name), rows, cols, norm, norm ? GgmlType::F32 : type, 0, 0};
    p.bytes = static_cast<uint64_t>(rows) * ggml_row_bytes(p.type, cols);
    plan.push_back(std::move(p));
  };
  add("token_embd.weight", config.vocab_size, dim, false);
  add("output_norm.weight", 1, dim, true);
  if (!config.shared_classifier) add("output.weight", config.vocab_size, dim, false);
  for (int64_t l = 0; l < config.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", 1, dim, true);
    add(b + "attn_q.weight", dim, dim, false);
    add(b + "attn_k.weight", kv, dim, false);
    add(b + "attn_v.weight", kv, dim, false);
    add(b + "attn_output.weight", dim, dim, false);
    add(b + "ffn_norm.weight", 1, dim, true);
    add(b + "ffn_gate.weight", hid, dim, false);
    add(b + "ffn_up.weight", hid, dim, false);
    add(b + "ffn_down.weight", dim, hid, false);
  }
  uint64_t total = 0;
  for (Planned& p : plan) {
    p.offset = total;
    total += (p.bytes + kAlign - 1) / kAlign * kAlign;
  }
  // On huge pages where the system gives them (core/large_buffer.hpp): decode streams it whole.
  const std::shared_ptr<uint8_t> buf = allocate_large(static_cast<size_t>(total)).data;

  // Row r of tensor t comes from its own generator, so pieces can run on any thread.
  const double half_width = static_cast<double>(scale) * std::sqrt(3.0);
  std::vector<WeightTensor> tensors;
  for (size_t t = 0; t < plan.size(); ++t) {
    const Planned& p = plan[t];
    uint8_t* dst = buf.get() + p.offset;
    const uint64_t row_bytes = ggml_row_bytes(p.type, p.cols);
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / p.cols);
    parallel_for(p.rows, grain, [&](int64_t r0, int64_t r1) {
      std::vector<float> row(static_cast<size_t>(p.cols));
      for (int64_t r = r0; r < r1; ++r) {
        Rng rng(seed ^ (0x9E3779B97F4A7C15ull * (t + 1)) ^ (0xD1B54A32D192ED03ull * (r + 1)));
        for (float& x : row)
          x = p.norm ? static_cast<float>(1.0 + rng.uniform(-0.1, 0.1))
                     : static_cast<float>(rng.uniform(-half_width, half_width));
        ggml_quantize(p.type, row.data(), dst + static_cast<uint64_t>(r) * row_bytes, p.cols);
      }
    });
    WeightTensor w;
    w.name = w.source = p.name;
    w.type = p.type;
    w.shape =
        p.rows == 1 && p.norm ? std::vector<int64_t>{p.cols} : std::vector<int64_t>{p.rows, p.cols};
    w.data = dst;
    w.bytes = p.bytes;
    tensors.push_back(std::move(w));
  }
  const std::string label = "random " + ggml_type_name(static_cast<uint32_t>(type)) + " model";
  return from_weights(ModelWeights::from_memory(a, std::move(tensors), buf, label));
}

}  // namespace vq

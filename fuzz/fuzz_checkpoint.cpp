// Fuzz target: the llama2.c checkpoint loader, vq::Model::load (it takes a path, so the bytes go
// through a per-process temp file). Invariants: load succeeds or throws vq::Error; an accepted
// model's file size equals what its header implies and every weight pointer is usable.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_tempfile.inc"
#include "fuzz_util.hpp"
#include "veloxquant/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = vq::fuzz::temp_path("checkpoint");
  vq::fuzz::write_temp(path, data, size);
  vq::Model m;
  if (!vq::fuzz::refused_cleanly([&] { m = vq::Model::load(path); })) return 0;
  const vq::ModelConfig& c = m.config();
  VQ_FUZZ_ASSERT(c.file_bytes() == static_cast<int64_t>(size), "accepted file of the wrong size");
  // Touch the first and last float of each table: out-of-range pointers trip ASan here. Each value
  // is checked on its own (a sum of large finite weights may overflow to inf).
  bool finite = true;
  const auto touch = [&](float v) { finite = finite && std::isfinite(v); };
  touch(m.token_embedding()[0]);
  touch(m.token_embedding()[c.vocab_size * c.dim - 1]);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const vq::LayerWeights w = m.layer(l);
    touch(w.w2[c.dim * c.hidden_dim - 1]);
    touch(w.wv[c.kv_dim() * c.dim - 1]);
  }
  touch(m.rms_final()[c.dim - 1]);
  touch(m.classifier()[c.vocab_size * c.dim - 1]);
  VQ_FUZZ_ASSERT(finite, "accepted checkpoint holds a non-finite weight");
  return 0;
}

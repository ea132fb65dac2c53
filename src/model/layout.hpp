// The float section of a llama2.c legacy checkpoint, tensor by tensor, in file order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "veloxquant/model.hpp"

namespace vq::model {

struct TensorSpan {
  std::string name;    ///< e.g. "wq"
  int64_t count = 0;   ///< floats, all layers together
  int64_t layers = 1;  ///< how many equal per-layer slices `count` holds (1 for global tensors)
  int64_t offset = 0;  ///< floats from the end of the header
};

/// Every tensor of `c` (validated) with its offset: token_embedding, rms_att, wq, wk, wv, wo,
/// rms_ffn, w1, w2, w3, rms_final, freq_cis_real, freq_cis_imag, then wcls when unshared.
std::vector<TensorSpan> checkpoint_layout(const ModelConfig& c);
const TensorSpan& find_span(const std::vector<TensorSpan>& spans, const char* name);

}  // namespace vq::model

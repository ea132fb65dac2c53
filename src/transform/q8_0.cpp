// `q8_0`: llama.cpp's 8-bit KV-cache type (8.5 bits per value): blocks of 32 values along each
// token's row of all KV heads, an fp16 scale per block, byte-identical to ggml's reference
// quantizer. The usual baseline C++ inference users already run.
#include "transform/ggml_method.hpp"

namespace vq {

MethodInfo q8_0_method_info() {
  return transform::ggml_method_info(
      "q8_0", coding::GgmlType::Q8_0,
      "llama.cpp q8_0 KV blocks: 32 int8 + fp16 scale along each token's H*D row (8.5 bits/value)");
}

}  // namespace vq

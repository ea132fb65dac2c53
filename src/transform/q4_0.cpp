// `q4_0`: llama.cpp's 4-bit KV-cache type (4.5 bits per value): blocks of 32 values along each
// token's row of all KV heads, 4-bit quants with offset 8 and an fp16 scale per block,
// byte-identical to ggml's reference quantizer.
#include "transform/ggml_method.hpp"

namespace vq {

MethodInfo q4_0_method_info() {
  return transform::ggml_method_info(
      "q4_0", coding::GgmlType::Q4_0,
      "llama.cpp q4_0 KV blocks: 32 4-bit + fp16 scale along each token's H*D row (4.5 bits/value)");
}

}  // namespace vq

// `q4_0`: llama.cpp's 4-bit KV-cache type. In a cache, blocks of 32 values lie inside each head,
// as in llama.cpp's KV cache (src/codecs/ggml_codec.hpp; block=16/8 are named variants for small
// heads); the .vqkv storage form (version 2) lays them out the same way, one section per head.
#include "transform/ggml_method.hpp"

namespace vq {

MethodInfo q4_0_method_info() {
  return transform::ggml_method_info("q4_0", coding::GgmlType::Q4_0,
                                     "llama.cpp q4_0 KV blocks inside each head: 32 4-bit + fp16 "
                                     "scale (4.5 bits/value; block=16/8 variants)");
}

}  // namespace vq

// `q8_0`: llama.cpp's 8-bit KV-cache type. In a cache, blocks of 32 values lie inside each head,
// as in llama.cpp's KV cache (src/codecs/ggml_codec.hpp; block=16/8 are named variants for small
// heads); the .vqkv storage form (version 2) lays them out the same way, one section per head.
#include "transform/ggml_method.hpp"

namespace vq {

MethodInfo q8_0_method_info() {
  return transform::ggml_method_info("q8_0", coding::GgmlType::Q8_0,
                                     "llama.cpp q8_0 KV blocks inside each head: 32 int8 + fp16 "
                                     "scale (8.5 bits/value; block=16/8 variants)");
}

}  // namespace vq

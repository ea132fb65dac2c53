// Registry entries of llama.cpp's q8_0 / q4_0 KV-cache formats (see coding/ggml_blocks.hpp).
#pragma once

#include "coding/ggml_blocks.hpp"
#include "veloxquant/registry.hpp"

namespace vq::transform {

/// A heads-coupled method storing each token's row of all KV heads (H * D values) in ggml blocks,
/// keys and values separately, with no raw window (every token is quantized on arrival).
MethodInfo ggml_method_info(const char* id, coding::GgmlType type, const char* description);

}  // namespace vq::transform

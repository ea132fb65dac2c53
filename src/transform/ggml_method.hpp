// Registry entries of llama.cpp's q8_0 / q4_0 KV-cache formats (see coding/ggml_blocks.hpp).
#pragma once

#include <memory>

#include "coding/ggml_blocks.hpp"
#include "veloxquant/codec.hpp"
#include "veloxquant/registry.hpp"

namespace vq::transform {

/// A method storing each token's keys and values of each head in ggml blocks that lie inside the
/// head (the `block` option), with no raw window (every token is quantized on arrival); its
/// storage form (.vqkv) writes one section per head, like the resident form.
MethodInfo ggml_method_info(const char* id, coding::GgmlType type, const char* description);

/// The block codec of .vqkv version-1 files of q8_0 / q4_0, whose blocks ran along each token's
/// row of all heads (one section per block, head -1); nullptr for any other method. Only readers
/// use it.
std::unique_ptr<BlockCodec> make_ggml_v1_codec(const CacheConfig& config, int64_t head_dim);

}  // namespace vq::transform

// Settings and factory types shared by the transform family's coders and block codecs. The
// caches themselves are the store's (src/store/head_store.hpp): a transform method registers its
// resident row codec (MethodInfo::make_row_codec) and its storage form (make_codec, .vqkv).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "transform/row_coder.hpp"
#include "veloxquant/config.hpp"

namespace vq::transform {

using CoderFactory = std::function<std::unique_ptr<RowCoder>(int64_t width)>;

using StreamCoderFactory =
    std::function<std::unique_ptr<RowCoder>(int64_t width, const StreamId& id)>;

struct TransformSettings {
  int64_t chunk_tokens = 128;  ///< rows per chunk once fitted (>= 1)
  int64_t fit_tokens = 1;      ///< rows collected before a fitting coder fits (>= 1)
  bool coupled = false;        ///< one stream spans every head of a batch row (W = H * D)
  int64_t sink_tokens = 0;     ///< the first positions are kept at fp16 and never encoded
  int64_t recent_tokens = 0;   ///< a chunk is encoded only if this many rows stay raw after it
  bool pre_rope = false;       ///< the cache asks the engine for un-rotated keys
};

/// Sizes of `n` rows split evenly into chunks of at most `chunk` rows.
std::vector<int64_t> even_chunks(int64_t n, int64_t chunk);

}  // namespace vq::transform

// Spelling of one-shot specs: an optional head-budget prefix ("adakv/", "adakv:alpha=A/") before
// a method spec, and whether a spec is a codec alone (nothing to evict).
#pragma once

#include <string>
#include <utility>

namespace vq::eviction {

/// The spec without its head-budget prefix, and that prefix ("" when there is none).
std::pair<std::string, std::string> split_head_budget(const std::string& spec);
/// True when the spec is a transform method alone (a codec: nothing to evict).
bool is_codec_alone(const std::string& spec);

}  // namespace vq::eviction

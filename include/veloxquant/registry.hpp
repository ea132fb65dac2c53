// The method registry: the single place each method is registered (id, family, description,
// options with defaults and ranges, factory). Tests, the CLI, the bindings and `veloxquant methods`
// all iterate over it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "veloxquant/config.hpp"

namespace vq {

class KVCache;
class BlockCodec;
class OneShotScorer;
struct CacheContext;
namespace store {
class RowCodec;
struct StreamInfo;
}  // namespace store

enum class Family : int { Eviction = 0, Transform = 1 };
const char* family_name(Family f);

struct OptionSpec {
  std::string name;
  OptionType type = OptionType::Int;
  std::string default_value;         ///< text form, parsed like a user value
  double min = 0, max = 0;           ///< inclusive range for Int/Float/IntList items
  std::vector<std::string> choices;  ///< allowed values for Choice
  std::string help;                  ///< one line: meaning and units
};

struct MethodInfo {
  std::string id;
  Family family = Family::Eviction;
  std::string description;  ///< one line
  std::vector<OptionSpec> options;
  /// True when heads of one layer share state, so results for one head depend on the others
  /// (no registered method does today: q8_0 / q4_0 blocks lie inside a head since .vqkv version
  /// 2). The generic head-independence test skips these.
  bool heads_coupled = false;
  /// Builds one layer's cache.
  std::function<std::unique_ptr<KVCache>(const CacheConfig&, const CacheContext&)> make_cache;
  /// Eviction family: the method's one-shot scoring of a prefilled context (kvpress's protocol:
  /// score every context token once, keep the best per KV head; see `eval --protocol prefill`
  /// and `evict --compress-ratio`). Empty for methods without one.
  std::function<std::unique_ptr<OneShotScorer>(const CacheConfig&)> make_scorer;
  /// Cross-option checks (e.g. n_sink < budget); throws InvalidArgument. May be empty.
  std::function<void(const CacheConfig&)> validate;
  /// Transform family (codecs) only: the resident row codec of one stream (one KV head's keys or
  /// values). The one way a codec is registered: caches (alone or composed with an eviction
  /// policy, "snapkv:budget=256+q4_0") store rows through it.
  std::function<std::unique_ptr<store::RowCodec>(const CacheConfig&, const store::StreamInfo&)>
      make_row_codec;
  /// Transform family only: a stateless codec for one [S, D] block (used by compress/.vqkv).
  std::function<std::unique_ptr<BlockCodec>(const CacheConfig&, int64_t head_dim)> make_codec;
};

/// Every registered method, in registration order.
const std::vector<MethodInfo>& methods();
/// The entry for `id`; throws InvalidArgument listing the known ids when absent.
const MethodInfo& find_method(std::string_view id);
const OptionSpec* find_option(const MethodInfo& m, std::string_view name);

}  // namespace vq

// CacheConfig: a method id plus typed options, parsed from and printed to a spec string
//   "curdkv:budget=512,n_sink=4,rank_cap=16"
// List options take comma-separated items that continue until the next key=value:
//   "kvtc:bit_budget=64,bit_choices=0,1,2,4,8,beta=3.5"
// Every option is checked against the method's registry entry (name, type, range, choices).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace vq {

enum class OptionType : int { Int = 0, Float = 1, Bool = 2, Choice = 3, IntList = 4, String = 5 };
const char* option_type_name(OptionType t);

using OptionValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;

class CacheConfig {
 public:
  CacheConfig() = default;

  /// Parse "method[:key=value,...]" or a composition "policy[:...]+codec[:...]" (an eviction
  /// method, then a codec method). Throws InvalidArgument for unknown methods or options,
  /// malformed values, values out of range, or cross-option violations (the method's validator).
  static CacheConfig parse(std::string_view spec);
  /// The method with every option at its default.
  static CacheConfig defaults(std::string_view method);

  const std::string& method() const { return method_; }

  /// Canonical text: the method, then the explicitly set options in registry order.
  /// parse(to_string()) == *this; with all=true every option is printed, defaults included.
  std::string to_string(bool all = false) const;

  /// Set one option from text (same rules as parse). Returns *this for chaining.
  CacheConfig& set(std::string_view key, std::string_view value);
  /// True if the option was given explicitly (not a default).
  bool is_set(std::string_view key) const;

  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;  ///< Choice or String options
  const std::vector<int64_t>& get_int_list(std::string_view key) const;

  /// The codec part of a composed spec "policy+codec" ("snapkv:budget=256+q4_0": the policy
  /// decides which tokens stay, the codec how each kept token is stored), or nullptr.
  const CacheConfig* codec() const { return codec_.get(); }

  bool operator==(const CacheConfig& o) const {
    return method_ == o.method_ && values_ == o.values_ && explicit_ == o.explicit_ &&
           (codec_ == nullptr) == (o.codec_ == nullptr) &&
           (codec_ == nullptr || *codec_ == *o.codec_);
  }

 private:
  const OptionValue& get(std::string_view key, OptionType expect) const;
  void validate() const;

  std::string method_;
  std::map<std::string, OptionValue, std::less<>> values_;  // every option, defaults filled
  std::map<std::string, bool, std::less<>> explicit_;       // which ones the user set
  std::shared_ptr<const CacheConfig> codec_;                // "+codec" part, immutable
};

}  // namespace vq

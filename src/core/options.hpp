// Short constructors for OptionSpec, used by each method's registry entry.
#pragma once

#include <string>
#include <vector>

#include "veloxquant/registry.hpp"

namespace vq {

inline OptionSpec opt_int(std::string name, long long def, long long lo, long long hi,
                          std::string help) {
  return OptionSpec{std::move(name),         OptionType::Int,         std::to_string(def),
                    static_cast<double>(lo), static_cast<double>(hi), {},
                    std::move(help)};
}
inline OptionSpec opt_float(std::string name, std::string def, double lo, double hi,
                            std::string help) {
  return OptionSpec{std::move(name), OptionType::Float, std::move(def), lo, hi, {},
                    std::move(help)};
}
inline OptionSpec opt_bool(std::string name, bool def, std::string help) {
  return OptionSpec{std::move(name), OptionType::Bool, def ? "true" : "false", 0, 1, {},
                    std::move(help)};
}
inline OptionSpec opt_choice(std::string name, std::string def, std::vector<std::string> choices,
                             std::string help) {
  return OptionSpec{std::move(name),    OptionType::Choice, std::move(def), 0, 0,
                    std::move(choices), std::move(help)};
}
inline OptionSpec opt_int_list(std::string name, std::string def, long long lo, long long hi,
                               std::string help) {
  return OptionSpec{std::move(name),         OptionType::IntList,     std::move(def),
                    static_cast<double>(lo), static_cast<double>(hi), {},
                    std::move(help)};
}
inline OptionSpec opt_string(std::string name, std::string def, std::string help) {
  return OptionSpec{std::move(name), OptionType::String, std::move(def), 0, 0, {}, std::move(help)};
}

/// The largest token budget any eviction method accepts.
constexpr long long kMaxBudget = 1LL << 30;

}  // namespace vq

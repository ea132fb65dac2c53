#include "veloxquant/registry.hpp"

#include "veloxquant/errors.hpp"

namespace vq {

#define VQ_METHOD(name) MethodInfo name##_method_info();
#include "methods/method_list.inc"
#undef VQ_METHOD

const char* family_name(Family f) {
  switch (f) {
    case Family::Eviction:
      return "eviction";
    case Family::Transform:
      return "transform";
  }
  return "?";
}

const std::vector<MethodInfo>& methods() {
  static const std::vector<MethodInfo> table = [] {
    std::vector<MethodInfo> t;
#define VQ_METHOD(name) t.push_back(name##_method_info());
#include "methods/method_list.inc"
#undef VQ_METHOD
    return t;
  }();
  return table;
}

const MethodInfo& find_method(std::string_view id) {
  for (const auto& m : methods())
    if (m.id == id) return m;
  std::string known;
  for (const auto& m : methods()) known += (known.empty() ? "" : ", ") + m.id;
  VQ_THROW(InvalidArgument, "unknown method '", id, "'; known methods: ", known);
}

const OptionSpec* find_option(const MethodInfo& m, std::string_view name) {
  for (const auto& o : m.options)
    if (o.name == name) return &o;
  return nullptr;
}

}  // namespace vq

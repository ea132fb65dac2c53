#include "veloxquant/config.hpp"

#include <charconv>
#include <cmath>
#include <sstream>

#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"

namespace vq {

const char* option_type_name(OptionType t) {
  switch (t) {
    case OptionType::Int:
      return "int";
    case OptionType::Float:
      return "float";
    case OptionType::Bool:
      return "bool";
    case OptionType::Choice:
      return "choice";
    case OptionType::IntList:
      return "int list";
    case OptionType::String:
      return "string";
  }
  return "?";
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string fmt_number(double x) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, res.ptr);
}

std::string range_text(const OptionSpec& o) {
  if (o.type == OptionType::Int || o.type == OptionType::IntList)
    return detail::cat("[", static_cast<int64_t>(o.min), ", ", static_cast<int64_t>(o.max), "]");
  return detail::cat("[", fmt_number(o.min), ", ", fmt_number(o.max), "]");
}

int64_t parse_int_item(const std::string& method, const OptionSpec& o, std::string_view text) {
  text = trim(text);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  VQ_CHECK(ec == std::errc() && p == text.data() + text.size() && !text.empty(), InvalidArgument,
           method, ": option '", o.name, "' expects an integer, got '", text, "'");
  VQ_CHECK(v >= static_cast<int64_t>(o.min) && v <= static_cast<int64_t>(o.max), InvalidArgument,
           method, ": option '", o.name, "' = ", v, " is out of range; allowed ", range_text(o));
  return v;
}

OptionValue parse_value(const std::string& method, const OptionSpec& o, std::string_view text) {
  text = trim(text);
  switch (o.type) {
    case OptionType::Int:
      return parse_int_item(method, o, text);
    case OptionType::Float: {
      double v = 0;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      VQ_CHECK(ec == std::errc() && p == text.data() + text.size() && !text.empty(),
               InvalidArgument, method, ": option '", o.name, "' expects a number, got '", text,
               "'");
      VQ_CHECK(std::isfinite(v) && v >= o.min && v <= o.max, InvalidArgument, method, ": option '",
               o.name, "' = ", text, " is out of range; allowed ", range_text(o));
      return v;
    }
    case OptionType::Bool:
      if (text == "true" || text == "1") return true;
      if (text == "false" || text == "0") return false;
      VQ_THROW(InvalidArgument, method, ": option '", o.name, "' expects true or false, got '",
               text, "'");
    case OptionType::Choice: {
      for (const auto& c : o.choices)
        if (c == text) return std::string(text);
      std::string allowed;
      for (const auto& c : o.choices) allowed += (allowed.empty() ? "" : "|") + c;
      VQ_THROW(InvalidArgument, method, ": option '", o.name, "' = '", text,
               "' is not allowed; choose one of ", allowed);
    }
    case OptionType::String:
      VQ_CHECK(!text.empty(), InvalidArgument, method, ": option '", o.name,
               "' needs a non-empty value");
      return std::string(text);
    case OptionType::IntList: {
      std::vector<int64_t> items;
      size_t start = 0;
      while (start <= text.size()) {
        size_t comma = text.find(',', start);
        if (comma == std::string_view::npos) comma = text.size();
        items.push_back(parse_int_item(method, o, text.substr(start, comma - start)));
        start = comma + 1;
      }
      return items;
    }
  }
  VQ_THROW(InvalidArgument, "unknown option type");
}

std::string print_value(const OptionValue& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) return fmt_number(*d);
  if (auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  const auto& list = std::get<std::vector<int64_t>>(v);
  std::string out;
  for (size_t i = 0; i < list.size(); ++i) out += (i ? "," : "") + std::to_string(list[i]);
  return out;
}

const OptionSpec& require_option(const MethodInfo& m, std::string_view key) {
  const OptionSpec* o = find_option(m, key);
  if (o == nullptr) {
    std::string known;
    for (const auto& opt : m.options) known += (known.empty() ? "" : ", ") + opt.name;
    VQ_THROW(InvalidArgument, m.id, ": unknown option '", key,
             "'; known options: ", known.empty() ? std::string("(none)") : known);
  }
  return *o;
}

}  // namespace

CacheConfig CacheConfig::defaults(std::string_view method) {
  const MethodInfo& m = find_method(method);
  CacheConfig c;
  c.method_ = m.id;
  for (const auto& o : m.options) {
    c.values_[o.name] = parse_value(m.id, o, o.default_value);
    c.explicit_[o.name] = false;
  }
  return c;
}

namespace {
// Where a composed spec's codec part starts: the first '+' followed by a registered method id
// (then ':' or the end). A '+' inside a value (a path, an exponent) is not followed by one.
size_t codec_split(std::string_view spec) {
  for (size_t p = spec.find('+'); p != std::string_view::npos; p = spec.find('+', p + 1)) {
    std::string_view rest = trim(spec.substr(p + 1));
    const std::string_view id = trim(rest.substr(0, rest.find(':')));
    for (const auto& m : methods())
      if (m.id == id) return p;
  }
  return std::string_view::npos;
}
}  // namespace

CacheConfig CacheConfig::parse(std::string_view spec) {
  spec = trim(spec);
  VQ_CHECK(!spec.empty(), InvalidArgument, "empty method spec; expected 'method[:key=value,...]'");
  if (const size_t plus = codec_split(spec); plus != std::string_view::npos) {
    const std::string_view left = trim(spec.substr(0, plus)), right = trim(spec.substr(plus + 1));
    VQ_CHECK(
        right.find('+') == std::string_view::npos || codec_split(right) == std::string_view::npos,
        InvalidArgument, "spec '", spec,
        "' composes more than two parts; expected 'policy[:...]+codec[:...]'");
    CacheConfig policy = parse(left);
    CacheConfig codec = parse(right);
    const MethodInfo& pm = find_method(policy.method());
    const MethodInfo& cm = find_method(codec.method());
    VQ_CHECK(pm.family == Family::Eviction, InvalidArgument, "spec '", spec, "': the first part '",
             policy.to_string(), "' is a codec (", family_name(pm.family),
             "); a composed spec is an eviction policy + a codec, e.g. 'snapkv:budget=256+q4_0'");
    VQ_CHECK(cm.make_row_codec != nullptr, InvalidArgument, "spec '", spec, "': the second part '",
             codec.to_string(), "' is an eviction policy too, like '", policy.to_string(),
             "'; one policy decides which tokens stay, the part after '+' must be a codec");
    policy.codec_ = std::make_shared<const CacheConfig>(std::move(codec));
    return policy;
  }
  const size_t colon = spec.find(':');
  const std::string_view id = trim(spec.substr(0, colon));
  CacheConfig c = defaults(id);
  if (colon == std::string_view::npos) return c;
  std::string_view rest = spec.substr(colon + 1);
  const MethodInfo& m = find_method(id);

  // Split on commas; a piece without '=' continues the previous (list) option.
  std::vector<std::pair<std::string, std::string>> assignments;
  size_t start = 0;
  while (start <= rest.size()) {
    size_t comma = rest.find(',', start);
    if (comma == std::string_view::npos) comma = rest.size();
    std::string_view piece = trim(rest.substr(start, comma - start));
    start = comma + 1;
    if (piece.empty()) {
      if (comma == rest.size() && assignments.empty()) break;  // "method:" with nothing after
      VQ_THROW(InvalidArgument, "method spec '", spec, "' has an empty option (stray comma)");
    }
    const size_t eq = piece.find('=');
    if (eq == std::string_view::npos) {
      VQ_CHECK(!assignments.empty(), InvalidArgument, "method spec '", spec, "': '", piece,
               "' is not of the form key=value");
      const OptionSpec& prev = require_option(m, assignments.back().first);
      VQ_CHECK(prev.type == OptionType::IntList, InvalidArgument, "method spec '", spec, "': '",
               piece, "' is not of the form key=value");
      assignments.back().second += "," + std::string(piece);
      continue;
    }
    assignments.emplace_back(std::string(trim(piece.substr(0, eq))),
                             std::string(piece.substr(eq + 1)));
  }
  for (const auto& [k, v] : assignments) {
    VQ_CHECK(!c.explicit_.at(require_option(m, k).name), InvalidArgument, m.id, ": option '", k,
             "' is given twice");
    const OptionSpec& o = require_option(m, k);
    c.values_[o.name] = parse_value(m.id, o, v);
    c.explicit_[o.name] = true;
  }
  c.validate();
  return c;
}

CacheConfig& CacheConfig::set(std::string_view key, std::string_view value) {
  const MethodInfo& m = find_method(method_);
  const OptionSpec& o = require_option(m, key);
  values_[o.name] = parse_value(m.id, o, value);
  explicit_[o.name] = true;
  validate();
  return *this;
}

bool CacheConfig::is_set(std::string_view key) const {
  auto it = explicit_.find(key);
  return it != explicit_.end() && it->second;
}

void CacheConfig::validate() const {
  const MethodInfo& m = find_method(method_);
  if (m.validate) m.validate(*this);
}

std::string CacheConfig::to_string(bool all) const {
  const MethodInfo& m = find_method(method_);
  std::string out = m.id;
  bool first = true;
  for (const auto& o : m.options) {
    if (!all && !explicit_.at(o.name)) continue;
    out += first ? ":" : ",";
    first = false;
    out += o.name + "=" + print_value(values_.at(o.name));
  }
  if (codec_ != nullptr) out += "+" + codec_->to_string(all);
  return out;
}

const OptionValue& CacheConfig::get(std::string_view key, OptionType expect) const {
  VQ_CHECK(!method_.empty(), InvalidArgument, "empty CacheConfig (no method)");
  const MethodInfo& m = find_method(method_);
  const OptionSpec& o = require_option(m, key);
  VQ_CHECK(o.type == expect || (expect == OptionType::String && o.type == OptionType::Choice),
           InvalidArgument, m.id, ": option '", key, "' is of type ", option_type_name(o.type),
           ", not ", option_type_name(expect));
  return values_.find(key)->second;
}

int64_t CacheConfig::get_int(std::string_view key) const {
  return std::get<int64_t>(get(key, OptionType::Int));
}
double CacheConfig::get_float(std::string_view key) const {
  return std::get<double>(get(key, OptionType::Float));
}
bool CacheConfig::get_bool(std::string_view key) const {
  return std::get<bool>(get(key, OptionType::Bool));
}
const std::string& CacheConfig::get_string(std::string_view key) const {
  return std::get<std::string>(get(key, OptionType::String));
}
const std::vector<int64_t>& CacheConfig::get_int_list(std::string_view key) const {
  return std::get<std::vector<int64_t>>(get(key, OptionType::IntList));
}

}  // namespace vq

#include "tokenizer/utf8.hpp"

#include <unordered_map>

namespace vq::tok {

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<std::string_view> utf8_chars(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t n = utf8_len(static_cast<unsigned char>(s[i]));
    if (n > s.size() - i) n = s.size() - i;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

const std::vector<std::string>& byte_to_unicode() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      append_utf8(t[b], printable ? b : next++);
    }
    return t;
  }();
  return table;
}

std::string bytes_to_unicode(std::string_view s) {
  const auto& t = byte_to_unicode();
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) out += t[c];
  return out;
}

std::string unicode_to_bytes(std::string_view s) {
  static const std::unordered_map<std::string, char> inv = [] {
    std::unordered_map<std::string, char> m;
    const auto& t = byte_to_unicode();
    for (int b = 0; b < 256; ++b) m[t[b]] = static_cast<char>(b);
    return m;
  }();
  std::string out;
  for (std::string_view ch : utf8_chars(s)) {
    auto it = inv.find(std::string(ch));
    if (it != inv.end())
      out += it->second;
    else
      out.append(ch);
  }
  return out;
}

}  // namespace vq::tok

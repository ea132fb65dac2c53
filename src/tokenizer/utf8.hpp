// Small UTF-8 and byte-level helpers shared by the tokenizers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vq::tok {

/// Length of the UTF-8 sequence a lead byte announces (1 for ASCII, continuation or invalid bytes).
inline size_t utf8_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

/// Append the UTF-8 encoding of code point `cp`.
void append_utf8(std::string& s, uint32_t cp);

/// Split into characters by lead byte (never past the end): what SPM and BPE start from.
std::vector<std::string_view> utf8_chars(std::string_view s);

/// GPT-2's reversible byte -> printable code point map (bytes that are printable Latin-1 map to
/// themselves, the other 68 to 256, 257, ... in byte order), as UTF-8 strings.
const std::vector<std::string>& byte_to_unicode();
/// Map every byte of `s` through byte_to_unicode().
std::string bytes_to_unicode(std::string_view s);
/// The inverse; characters outside the map are copied as they are.
std::string unicode_to_bytes(std::string_view s);

}  // namespace vq::tok

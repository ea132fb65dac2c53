// Unicode normalization through ICU (unorm2_*): UTF-8 -> UTF-16 -> normalized UTF-16 -> UTF-8.
// Every buffer is sized by ICU's own preflight, so memory follows the text's length.
#include "tokenizer/normalize.hpp"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf8.h>

#include <climits>
#include <vector>

#include "veloxquant/errors.hpp"

namespace vq::tok {

UnicodeForm unicode_form(const std::string& name) {
  if (name == "NFC") return UnicodeForm::NFC;
  if (name == "NFD") return UnicodeForm::NFD;
  if (name == "NFKC") return UnicodeForm::NFKC;
  if (name == "NFKD") return UnicodeForm::NFKD;
  return UnicodeForm::None;
}

const char* unicode_form_name(UnicodeForm f) {
  switch (f) {
    case UnicodeForm::NFC:
      return "NFC";
    case UnicodeForm::NFD:
      return "NFD";
    case UnicodeForm::NFKC:
      return "NFKC";
    case UnicodeForm::NFKD:
      return "NFKD";
    case UnicodeForm::None:
      break;
  }
  return "none";
}

namespace {

const UNormalizer2* instance(UnicodeForm f) {
  UErrorCode e = U_ZERO_ERROR;
  const UNormalizer2* n = nullptr;
  switch (f) {
    case UnicodeForm::NFC:
      n = unorm2_getNFCInstance(&e);
      break;
    case UnicodeForm::NFD:
      n = unorm2_getNFDInstance(&e);
      break;
    case UnicodeForm::NFKC:
      n = unorm2_getNFKCInstance(&e);
      break;
    case UnicodeForm::NFKD:
      n = unorm2_getNFKDInstance(&e);
      break;
    case UnicodeForm::None:
      break;
  }
  VQ_CHECK(U_SUCCESS(e) && n != nullptr, Error, "ICU could not load the ", unicode_form_name(f),
           " normalizer: ", u_errorName(e));
  return n;
}

// Offset of the first byte that does not start a well-formed UTF-8 character, or -1.
int64_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const int32_t n = static_cast<int32_t>(s.size());
  int32_t i = 0;
  while (i < n) {
    const int32_t at = i;
    UChar32 c;
    U8_NEXT(p, i, n, c);
    if (c < 0) return at;
  }
  return -1;
}

}  // namespace

std::string normalize_unicode(std::string_view text, UnicodeForm form) {
  if (form == UnicodeForm::None) return std::string(text);
  bool ascii = true;
  for (char ch : text) ascii &= static_cast<unsigned char>(ch) < 0x80;
  if (ascii) return std::string(text);
  VQ_CHECK(text.size() <= static_cast<size_t>(INT32_MAX / 4), InvalidArgument, "text of ",
           text.size(), " bytes is longer than Unicode normalization takes at once (",
           INT32_MAX / 4, ")");
  const int64_t bad = first_invalid_utf8(text);
  VQ_CHECK(bad < 0, InvalidArgument, "the text is not valid UTF-8 (byte 0x", std::hex,
           static_cast<int>(static_cast<unsigned char>(text[static_cast<size_t>(bad)])), std::dec,
           " at offset ", bad, "), so it cannot be normalized to ", unicode_form_name(form));
  const int32_t n8 = static_cast<int32_t>(text.size());
  UErrorCode e = U_ZERO_ERROR;
  int32_t n16 = 0;
  u_strFromUTF8(nullptr, 0, &n16, text.data(), n8, &e);  // preflight
  std::vector<UChar> src(static_cast<size_t>(n16) + 1);
  e = U_ZERO_ERROR;
  u_strFromUTF8(src.data(), n16 + 1, &n16, text.data(), n8, &e);
  VQ_CHECK(U_SUCCESS(e), InvalidArgument, "ICU could not read the text as UTF-8: ", u_errorName(e));
  const UNormalizer2* norm = instance(form);
  e = U_ZERO_ERROR;
  const int32_t nn = unorm2_normalize(norm, src.data(), n16, nullptr, 0, &e);  // preflight
  VQ_CHECK(e == U_BUFFER_OVERFLOW_ERROR || U_SUCCESS(e), Error, "ICU ", unicode_form_name(form),
           " normalization failed: ", u_errorName(e));
  std::vector<UChar> out(static_cast<size_t>(nn) + 1);
  e = U_ZERO_ERROR;
  unorm2_normalize(norm, src.data(), n16, out.data(), nn + 1, &e);
  VQ_CHECK(U_SUCCESS(e), Error, "ICU ", unicode_form_name(form),
           " normalization failed: ", u_errorName(e));
  int32_t m8 = 0;
  e = U_ZERO_ERROR;
  u_strToUTF8(nullptr, 0, &m8, out.data(), nn, &e);  // preflight
  std::string result(static_cast<size_t>(m8), '\0');
  e = U_ZERO_ERROR;
  u_strToUTF8(result.data(), m8, &m8, out.data(), nn, &e);
  VQ_CHECK(U_SUCCESS(e) || e == U_STRING_NOT_TERMINATED_WARNING, Error,
           "ICU could not write the normalized text as UTF-8: ", u_errorName(e));
  return result;
}

}  // namespace vq::tok

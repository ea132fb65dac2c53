// Unicode normalization of UTF-8 text (tokenizer.json "normalizer" of type NFC, NFD, NFKC, NFKD),
// through ICU's Normalizer2 (Debian's libicu-dev).
#pragma once

#include <string>
#include <string_view>

namespace vq::tok {

enum class UnicodeForm { None, NFC, NFD, NFKC, NFKD };

/// "NFC" -> UnicodeForm::NFC, ...; UnicodeForm::None for any other name.
UnicodeForm unicode_form(const std::string& name);
const char* unicode_form_name(UnicodeForm f);

/// `text` in normalization form `form` (None: unchanged). ASCII text is returned as is (every
/// form leaves it unchanged). InvalidArgument naming the byte offset when `text` is not valid
/// UTF-8.
std::string normalize_unicode(std::string_view text, UnicodeForm form);

}  // namespace vq::tok

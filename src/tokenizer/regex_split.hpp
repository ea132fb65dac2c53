// Regex pre-tokenization through PCRE2 (UTF, Unicode properties, invalid UTF-8 tolerated).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace vq::tok {

/// A sequence of regexes applied one after another: each splits every current piece into its
/// matches and the gaps between them (both kept, in order, empty ones dropped), so the pieces
/// always concatenate back to the input. This is llama.cpp's and Hugging Face's "Isolated" split.
class RegexSplitter {
 public:
  RegexSplitter();
  /// Throws InvalidArgument naming the pattern when PCRE2 cannot compile it.
  explicit RegexSplitter(const std::vector<std::string>& patterns);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  std::vector<std::string> split(std::string_view text) const;
  bool empty() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The regex list of a GGUF pre-tokenizer name; InvalidArgument/FormatError naming it (with the
/// supported list) when unknown.
std::vector<std::string> gguf_pretokenizer_regexes(const std::string& pre);
/// GPT-2's own pattern (the Hugging Face ByteLevel pre-tokenizer's use_regex pattern).
const std::string& gpt2_regex();

}  // namespace vq::tok

// Byte-level BPE (GPT-2 style) and SentencePiece-style BPE over a vocabulary; built from GGUF
// metadata (gguf_tokenizer.cpp) or a Hugging Face tokenizer.json (hf_tokenizer.cpp).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/normalize.hpp"
#include "tokenizer/regex_split.hpp"
#include "tokenizer/vocab_core.hpp"
#include "veloxquant/tokenizers.hpp"

namespace vq::tok {

class BpeTokenizer : public TextTokenizer {
 public:
  Vocab vocab;
  std::unordered_map<std::string, int32_t> ranks;  ///< left + '\0' + right -> merge rank
  RegexSplitter splitter;
  bool ignore_merges = false;  ///< a word that is itself a token is emitted whole (llama3)
  bool add_prefix_space = false;
  /// The tokenizer.json's Unicode normalizer (NFC for Qwen2), applied to the text between
  /// special tokens before pre-tokenization.
  UnicodeForm normalizer = UnicodeForm::None;
  std::vector<int32_t> always_specials;  ///< matched even with parse_special = false
  std::vector<int32_t> parse_specials;   ///< matched only with parse_special = true
  int32_t bos = -1, eos = -1;
  bool add_bos = false;
  std::string desc;

  /// Merge list entries "left right" -> ranks; FormatError naming the entry when malformed.
  void set_merges(const std::vector<std::string>& merges, const std::string& where);

  std::vector<int32_t> encode(std::string_view text, bool add_bos_token,
                              bool parse_special) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return vocab.size(); }
  int32_t bos_id() const override { return bos; }
  int32_t eos_id() const override { return eos; }
  bool add_bos_default() const override { return add_bos; }
  std::string description() const override { return desc; }

 private:
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;
};

class SpmTokenizer : public TextTokenizer {
 public:
  Vocab vocab;
  std::vector<float> scores;
  bool add_space_prefix = true;
  std::vector<int32_t> always_specials, parse_specials;
  int32_t bos = -1, eos = -1, unk = -1;
  bool add_bos = true;
  std::string desc;

  std::vector<int32_t> encode(std::string_view text, bool add_bos_token,
                              bool parse_special) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return vocab.size(); }
  int32_t bos_id() const override { return bos; }
  int32_t eos_id() const override { return eos; }
  bool add_bos_default() const override { return add_bos; }
  std::string description() const override { return desc; }

 private:
  void encode_text(const std::string& text, std::vector<int32_t>& out) const;
};

}  // namespace vq::tok

// Tokenizers read from model files:
//   - GGUF vocabularies: tokenizer.ggml.model "llama" (SentencePiece-style BPE over scores, token
//     types, byte fallback <0xNN>) and "gpt2" (byte-level BPE with merges, pre-tokenizer regexes
//     chosen by tokenizer.ggml.pre, run through PCRE2 in UTF + Unicode-property mode);
//   - SentencePiece tokenizer.model (libsentencepiece);
//   - Hugging Face tokenizer.json of type BPE with a ByteLevel pre-tokenizer (optionally behind
//     Split regexes), merges and added tokens;
//   - the llama2.c tokenizer.bin (vq::Tokenizer).
// encode() follows llama.cpp's conventions for GGUF vocabularies: with parse_special = false,
// control tokens written in the text are tokenized as plain text, while user-defined tokens are
// still matched; add_bos prepends the file's BOS id (when it has one).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace vq {

class GgufFile;

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos,
                                      bool parse_special = false) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  /// -1 when the file defines none.
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  /// Whether the file asks for BOS by default (what `tokenize` does without --no-bos).
  virtual bool add_bos_default() const = 0;
  /// e.g. "gguf llama (SentencePiece BPE)", "gguf gpt2 (byte-level BPE, pre gpt-2)".
  virtual std::string description() const = 0;
};

/// Build the tokenizer stored in a GGUF file's metadata. FormatError when the file has no
/// vocabulary (the message asks for --tokenizer), an unsupported tokenizer.ggml.model or
/// tokenizer.ggml.pre (named, with the supported list), or inconsistent arrays.
std::unique_ptr<TextTokenizer> tokenizer_from_gguf(const GgufFile& g);

/// Load from a path: a .gguf, a tokenizer.model, a tokenizer.json, a llama2.c tokenizer.bin, or
/// a Hugging Face directory (tokenizer.json preferred, then tokenizer.model).
std::unique_ptr<TextTokenizer> load_tokenizer(const std::string& path);

/// The pre-tokenizer names tokenizer.ggml.pre may take here.
std::vector<std::string> supported_gguf_pretokenizers();

/// Split `text` the way pre-tokenizer `pre` does (the pieces concatenate back to `text`).
/// Exposed for tests.
std::vector<std::string> pretokenize(const std::string& pre, std::string_view text);

/// Directories searched for llama.cpp's ggml-vocab-*.gguf test files: $VQ_VOCAB_DIR,
/// $VQ_MODELS_DIR/../vocab and $VQ_MODELS_DIR, then ../shared/vocab next to each candidate project
/// root (the same roots as model_search_dirs()).
std::vector<std::string> vocab_search_dirs();
/// The first existing `name` in vocab_search_dirs(), or "".
std::string locate_vocab_file(const std::string& name);

}  // namespace vq

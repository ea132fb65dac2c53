// A model together with its tokenizer, and text generation on top of Engine: what the CLI's model
// commands, the Python module and the C API share (the way the files are loaded, FileLoad, is
// the CLI's --load; the Python module and the C API map them).
//
//   TextModel m = TextModel::open("stories260K.gguf");     // the vocabulary inside the file
//   TextModel b = TextModel::open("stories260K.bin");      // tok512.bin found by vocabulary size
//   std::vector<int32_t> prompt = m.encode_prompt("Once upon a time");
//   GeneratedText g = generate_text(m, prompt, CacheConfig::parse("snapkv:budget=64+q8_0"), {},
//   go); g.text  // the prompt text after BOS and the new tokens, as `veloxquant generate` prints
//   them
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "veloxquant/config.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/tokenizers.hpp"

namespace vq {

/// A Model with the tokenizer that goes with it.
struct TextModel {
  std::string model_path;
  std::string tokenizer_path;  ///< "" when no tokenizer was loaded
  Model model;
  std::unique_ptr<TextTokenizer> tok;  ///< null only when none was needed and none found

  /// Open `model_path` (Model::open: .gguf, Hugging Face directory or llama2.c .bin) and its
  /// tokenizer: `tokenizer_path` when non-empty (.bin, .gguf, tokenizer.model, tokenizer.json or
  /// a directory), else the vocabulary inside the .gguf / directory, else (a .bin) the tokNNN.bin
  /// matching its vocabulary size from the model search directories. With need_tokenizer = false
  /// a default tokenizer that cannot be found or read is not an error (tok stays null).
  /// InvalidArgument when the tokenizer's size does not fit the model's vocabulary. `how`:
  /// Model::open's.
  static TextModel open(const std::string& model_path, const std::string& tokenizer_path = "",
                        bool need_tokenizer = true, FileLoad how = FileLoad::Map);

  /// The token every evaluation window starts with: the tokenizer's BOS (its EOS when it has no
  /// BOS, as Qwen2's vocabularies), llama2.c's 1 for a .bin model without a tokenizer.
  int32_t bos() const;
  /// Tokens that end generation: BOS and EOS of the tokenizer (llama2.c's 1 and 2 without one).
  std::vector<int32_t> stop_tokens() const;
  /// The tokenizer, or InvalidArgument naming the model when none was loaded.
  const TextTokenizer& tokenizer() const;
  /// A generation prompt: `text` encoded with the BOS the vocabulary asks for; BOS alone when
  /// that gives no token. InvalidArgument when it is longer than the context length.
  std::vector<int32_t> encode_prompt(const std::string& text) const;
  /// Ids checked against the vocabulary (InvalidArgument naming `what`, the index and the range).
  void check_ids(const std::vector<int32_t>& ids, const std::string& what) const;
};

/// The text of a growing token sequence, piece by piece, as `veloxquant generate` prints it: the
/// decoded text of everything so far, of which each push returns the bytes not returned before
/// (a piece decodes differently at the start of a text). A leading BOS gives no text; a chunk that
/// is a single control byte other than \n, \t, \r is dropped (llama2.c's safe_printf). Without a
/// tokenizer the ids are written, each followed by a space.
class TextStream {
 public:
  explicit TextStream(const TextTokenizer* tok) : tok_(tok) {}
  /// Append tokens and return the new text.
  std::string push(const std::vector<int32_t>& tokens);
  /// Everything returned so far.
  const std::string& text() const { return text_; }

 private:
  const TextTokenizer* tok_;
  std::vector<int32_t> ids_;
  std::string decoded_;  // decode(ids_) so far
  std::string text_;
};

struct GeneratedText {
  std::vector<int32_t> prompt;  ///< as given
  std::vector<int32_t> tokens;  ///< the new tokens (the stop token not included)
  std::string text;             ///< the prompt after its BOS, then the new tokens (TextStream)
  CacheStats stats;             ///< the caches at the end (Engine::stats)
};

/// Run `prompt` through an Engine whose caches follow `cache`, then generate up to opt.steps
/// tokens (opt.stop_tokens empty: the model's stop_tokens()). on_text, when given, receives each
/// new piece of text as it is produced (the prompt's first). The prompt must be non-empty and fit
/// the context (InvalidArgument).
GeneratedText generate_text(const TextModel& m, const std::vector<int32_t>& prompt,
                            const CacheConfig& cache, const EngineOptions& engine_options,
                            GenerateOptions opt,
                            const std::function<void(const std::string&)>& on_text = {});

}  // namespace vq

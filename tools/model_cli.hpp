// Shared by the model subcommands (generate, perplexity, eval): finding and loading the model,
// its tokenizer and the evaluation text, with defaults from the shared models directory.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "eval/fidelity.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"

namespace vqcli {

/// The model used when --model is absent.
inline constexpr const char* kDefaultModel = "stories260K.bin";
/// The text used by eval when --text is absent.
inline constexpr const char* kDefaultText = "tinystories-val.txt";

/// --model, or the default model from the search directories.
inline std::string resolve_model(const std::string& given) {
  return vq::find_model_file(kDefaultModel, given);
}

/// --tokenizer, or the tokenizer known to match the model's vocabulary size.
inline std::string resolve_tokenizer(const std::string& given, int64_t vocab_size) {
  if (!given.empty()) return given;
  const std::string name = vq::default_tokenizer_for(vocab_size);
  VQ_CHECK(!name.empty(), vq::InvalidArgument,
           "no default tokenizer is known for vocab_size = ", vocab_size, "; pass --tokenizer");
  return vq::find_model_file(name);
}

/// The whole file as bytes. Throws IoError.
inline std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  VQ_CHECK(f.good(), vq::IoError, "cannot open text file '", path, "'");
  std::ostringstream os;
  os << f.rdbuf();
  VQ_CHECK(!f.bad(), vq::IoError, "failed reading text file '", path, "'");
  return os.str();
}

/// The text of --text (or the default text) encoded without BOS, its first `skip_tokens` tokens
/// dropped, cut into windows of the model's context by eval::make_windows (at most max_tokens
/// tokens, 0 = all). `purpose` ("evaluate", "calibrate on") words the errors; the resolved text
/// path is returned through text_path.
inline std::vector<std::vector<int32_t>> text_windows(const vq::Tokenizer& tok,
                                                      const std::string& text_arg,
                                                      int64_t skip_tokens, int64_t max_tokens,
                                                      int64_t seq_len, const char* purpose,
                                                      std::string& text_path) {
  text_path = vq::find_model_file(kDefaultText, text_arg);
  std::vector<int32_t> enc = tok.encode(read_text_file(text_path), false, false);
  VQ_CHECK(skip_tokens < static_cast<int64_t>(enc.size()), vq::InvalidArgument, "--skip-tokens ",
           skip_tokens, " leaves nothing to ", purpose, ": the text '", text_path,
           "' encodes to ", enc.size(), " tokens");
  enc.erase(enc.begin(), enc.begin() + skip_tokens);
  auto windows = vq::eval::make_windows(enc, seq_len, max_tokens);
  VQ_CHECK(!windows.empty(), vq::InvalidArgument, "the text '", text_path,
           "' encodes to no tokens");
  return windows;
}

}  // namespace vqcli

// Shared by the model subcommands (generate, perplexity, eval): finding and loading the model,
// its tokenizer and the evaluation text, with defaults from the shared models directory.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

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

}  // namespace vqcli

// Shared by the model subcommands (generate, perplexity, eval): finding and loading the model,
// its tokenizer and the evaluation text, with defaults from the shared models directory.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include <cstdio>
#include <vector>

#include "cli_util.hpp"
#include "eval/fidelity.hpp"
#include "veloxquant/calibration.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/registry.hpp"

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
           skip_tokens, " leaves nothing to ", purpose, ": the text '", text_path, "' encodes to ",
           enc.size(), " tokens");
  enc.erase(enc.begin(), enc.begin() + skip_tokens);
  auto windows = vq::eval::make_windows(enc, seq_len, max_tokens);
  VQ_CHECK(!windows.empty(), vq::InvalidArgument, "the text '", text_path,
           "' encodes to no tokens");
  return windows;
}

/// Every calibration file a method spec names (kvtc:basis=FILE) must have been measured on the
/// model at `model_path`: refuse one that records another model's digest, naming both (a
/// warning instead when `allow_foreign`), and warn about files that record none (version 1).
inline void check_calibrations(const std::vector<std::string>& specs, const std::string& model_path,
                               bool allow_foreign, const Globals& g) {
  uint64_t digest = 0;
  for (const std::string& spec : specs) {
    const vq::CacheConfig c = vq::CacheConfig::parse(spec);
    bool has_basis = false;
    for (const auto& o : vq::find_method(c.method()).options) has_basis |= o.name == "basis";
    if (!has_basis || c.get_string("basis") == "local") continue;
    const std::string& path = c.get_string("basis");
    const auto cal = vq::load_calibration_shared(path);
    char have[17], want[17];
    std::snprintf(have, sizeof have, "%016llx", static_cast<unsigned long long>(cal->model_id));
    if (cal->model_id == 0) {
      if (g.verbosity > 0)
        std::fprintf(stderr,
                     "veloxquant: warning: calibration '%s' records no model identity (an older "
                     "file); it cannot be checked against '%s'\n",
                     path.c_str(), model_path.c_str());
      continue;
    }
    if (digest == 0) digest = vq::model_digest(model_path);
    std::snprintf(want, sizeof want, "%016llx", static_cast<unsigned long long>(digest));
    if (cal->model_id == digest) continue;
    VQ_CHECK(allow_foreign, vq::InvalidArgument, "calibration '", path,
             "' was measured on a model with digest ", have, ", but '", model_path, "' has digest ",
             want,
             ": a calibration of another model (recalibrate with `veloxquant calibrate --model "
             "...`, or pass --allow-foreign-calibration to use it anyway)");
    if (g.verbosity > 0)
      std::fprintf(stderr,
                   "veloxquant: warning: --allow-foreign-calibration: '%s' was measured on model "
                   "%s, running it on '%s' (%s)\n",
                   path.c_str(), have, model_path.c_str(), want);
  }
}

}  // namespace vqcli

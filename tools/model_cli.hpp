// Shared by the model subcommands (generate, perplexity, eval, calibrate, dump-kv): finding and
// loading the model (llama2.c .bin, .gguf or Hugging Face directory), its tokenizer (from the
// GGUF / directory itself, or --tokenizer) and the evaluation text or pre-tokenized ids, with
// defaults from the shared models directory.
#pragma once

#include <memory>
#include <string>

#include <cstdio>
#include <vector>

#include "cli_util.hpp"
#include "eval/fidelity.hpp"
#include "veloxquant/calibration.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/npy.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/text_model.hpp"
#include "veloxquant/tokenizers.hpp"
#include "veloxquant/vqkv.hpp"

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

/// Help text of --model and --tokenizer, the same for every model command.
inline constexpr const char* kModelHelp =
    "model: a llama2.c checkpoint .bin, a .gguf file or a Hugging Face directory (config.json + "
    "*.safetensors) (default: stories260K.bin)";
inline constexpr const char* kTokenizerHelp =
    "tokenizer (.bin, .gguf, tokenizer.model, tokenizer.json or a directory); default: the one "
    "inside the .gguf / directory, or the tokNNN.bin matching a .bin model's vocabulary";
inline constexpr const char* kTextIdsHelp =
    "pre-tokenized input instead of text: a 1-D .npy of int32 (or int64) token ids";

/// Help text of --load, the same for every model command.
inline constexpr const char* kLoadHelp =
    "how a .gguf / Hugging Face model's files come into memory: map (mmap, instant and shared "
    "with other processes) or copy (read into this process's memory on 2 MiB pages where the "
    "system gives them: slower to open, faster decode); a llama2.c .bin is always read";

/// --load map|copy (default map).
inline void add_load_option(CLI::App* cmd, std::string& load) {
  cmd->add_option("--load", load, kLoadHelp)
      ->check(CLI::IsMember({"map", "copy"}))
      ->capture_default_str();
}

/// A model with its tokenizer (the library's TextModel).
using LoadedModel = vq::TextModel;

/// Load --model (or the default model) and its tokenizer: --tokenizer when given, else the one
/// inside a .gguf / Hugging Face directory, else (a .bin) the tokNNN.bin matching its vocabulary.
/// With need_tokenizer = false (the input is --text-ids) a tokenizer that cannot be found is
/// not an error (tok stays null). `load`: --load's value ("map" or "copy").
inline LoadedModel load_model(const std::string& model_arg, const std::string& tok_arg,
                              bool need_tokenizer, const std::string& load = "map") {
  return vq::TextModel::open(resolve_model(model_arg), tok_arg, need_tokenizer,
                             vq::parse_file_load(load));
}

/// Token ids from a .npy (1-D, int32 or int64), each checked against the vocabulary.
inline std::vector<int32_t> read_text_ids(const std::string& path, int64_t vocab_size) {
  const vq::NpyArray a = vq::read_npy(path);
  VQ_CHECK(a.dtype == vq::NpyDtype::Int32 || a.dtype == vq::NpyDtype::Int64, vq::InvalidArgument,
           "--text-ids '", path, "' holds ", vq::npy_dtype_name(a.dtype),
           ", expected int32 token ids");
  VQ_CHECK(a.shape.size() == 1, vq::InvalidArgument, "--text-ids '", path, "' has shape ",
           a.shape_str(), ", expected a 1-D array of token ids");
  const std::vector<int64_t> v = a.to_int64();
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    VQ_CHECK(v[i] >= 0 && v[i] < vocab_size, vq::InvalidArgument, "--text-ids '", path, "': id ",
             v[i], " at index ", i, " is outside the vocabulary [0, ", vocab_size, ")");
    ids.push_back(static_cast<int32_t>(v[i]));
  }
  VQ_CHECK(!ids.empty(), vq::InvalidArgument, "--text-ids '", path, "' holds no token ids");
  return ids;
}

/// The whole file as bytes. Throws IoError naming the path (a directory, an unreadable file, a
/// stream past vq::kMaxStreamBytes such as /dev/zero).
inline std::string read_text_file(const std::string& path) {
  const std::vector<uint8_t> b = vq::read_file_bytes(path);
  return std::string(b.begin(), b.end());
}

/// The text of --text (or the default text) encoded without BOS, or the ids of --text-ids, its
/// first `skip_tokens` tokens dropped, cut into windows of the model's context by
/// eval::make_windows (each starting with the model's BOS; at most max_tokens tokens, 0 = all).
/// `purpose` ("evaluate", "calibrate on") words the errors; the resolved text path is returned
/// through text_path.
inline std::vector<std::vector<int32_t>> text_windows(const LoadedModel& m,
                                                      const std::string& text_arg,
                                                      const std::string& ids_arg,
                                                      int64_t skip_tokens, int64_t max_tokens,
                                                      const char* purpose, std::string& text_path) {
  const vq::ModelConfig& mc = m.model.config();
  std::vector<int32_t> enc;
  if (!ids_arg.empty()) {
    text_path = ids_arg;
    enc = read_text_ids(ids_arg, mc.vocab_size);
  } else {
    text_path = vq::find_model_file(kDefaultText, text_arg);
    enc = m.tok->encode(read_text_file(text_path), false, false);
  }
  // The messages name the options a user of the CLI passes.
  VQ_CHECK(skip_tokens < static_cast<int64_t>(enc.size()), vq::InvalidArgument, "--skip-tokens ",
           skip_tokens, " leaves nothing to ", purpose, ": the text '", text_path, "' encodes to ",
           enc.size(), " tokens");
  auto windows =
      vq::eval::eval_windows(enc, mc.seq_len, skip_tokens, max_tokens, m.bos(), text_path);
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

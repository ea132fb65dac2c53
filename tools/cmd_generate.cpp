// `veloxquant generate`: sample text from a model (llama2.c .bin, .gguf or Hugging Face
// directory) with a chosen KV-cache method.
#include <chrono>
#include <memory>

#include "cli_util.hpp"
#include "model_cli.hpp"
#include "veloxquant/model.hpp"

namespace vqcli {

namespace {

// Print a decoded piece, dropping lone control bytes the way llama2.c's safe_printf does.
void print_piece(const std::string& s) {
  if (s.size() == 1) {
    const unsigned char c = static_cast<unsigned char>(s[0]);
    if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') return;
  }
  std::fwrite(s.data(), 1, s.size(), stdout);
}

}  // namespace

void register_generate(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "generate", "Generate text with a model; every layer's KV cache uses --method");
  struct Opts {
    std::string model, tokenizer, prompt, text_ids, method = "full";
    int64_t steps = 256;
    float temperature = 0.0f;
    uint64_t seed = 0;
    bool strict_view = false, allow_foreign = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, kModelHelp);
  cmd->add_option("--tokenizer", o->tokenizer, kTokenizerHelp);
  auto* po =
      cmd->add_option("--prompt", o->prompt, "text to continue (default: start from BOS alone)");
  cmd->add_option("--text-ids", o->text_ids,
                  "the prompt as token ids instead of --prompt: a 1-D .npy of int32 ids, used as "
                  "given (put the BOS in it yourself)")
      ->excludes(po);
  cmd->add_option("--steps", o->steps, "most new tokens (capped by the context length)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--temperature", o->temperature, "0 = greedy; otherwise softmax sampling")
      ->check(CLI::Range(0.0f, 100.0f));
  cmd->add_option("--seed", o->seed, "sampling seed (and cache seed)");
  cmd->add_option("--method", o->method, "KV-cache method spec, e.g. 'curdkv:budget=64'");
  cmd->add_flag("--strict-view", o->strict_view,
                "a token the cache drops at once does not attend to itself (see docs/eval.md)");
  cmd->add_flag("--allow-foreign-calibration", o->allow_foreign,
                "use a kvtc calibration (basis=FILE) measured on another model (a warning "
                "instead of an error)");
  add_threads_option(cmd);
  cmd->callback([o, &g] {
    const vq::CacheConfig cfg = vq::CacheConfig::parse(o->method);
    const LoadedModel lm = load_model(o->model, o->tokenizer, o->text_ids.empty());
    const std::string& model_path = lm.model_path;
    const vq::Model& model = lm.model;
    check_calibrations({o->method}, model_path, o->allow_foreign, g);
    vq::EngineOptions eo;
    eo.seed = o->seed;
    eo.strict_view = o->strict_view;
    vq::Engine engine(model, cfg, eo);
    std::vector<int32_t> prompt;
    if (!o->text_ids.empty())
      prompt = read_text_ids(o->text_ids, model.config().vocab_size);
    else
      prompt = lm.tok->encode(o->prompt, lm.tok->add_bos_default(), false);
    if (prompt.empty()) prompt.push_back(lm.bos());  // a vocabulary that adds no BOS itself
    VQ_CHECK(static_cast<int64_t>(prompt.size()) <= model.config().seq_len, vq::InvalidArgument,
             "the prompt encodes to ", prompt.size(), " tokens, more than the context length ",
             model.config().seq_len);
    // The text is printed as it grows: the decoded (prompt after BOS + new tokens), each time the
    // bytes past what was already printed (pieces decode differently at the start of a text).
    std::vector<int32_t> shown;
    std::string printed;
    const bool skip_bos = lm.tok && prompt.front() == lm.tok->bos_id();
    // A GGUF SentencePiece vocabulary decodes the dummy-prefix space of the first word; like
    // llama2.c and libsentencepiece, the text after BOS starts without it.
    const bool drop_space = skip_bos && lm.tok->description().rfind("gguf llama", 0) == 0;
    auto show = [&](const std::vector<int32_t>& add) {
      shown.insert(shown.end(), add.begin(), add.end());
      if (!lm.tok) {  // --text-ids without a vocabulary: the ids
        for (int32_t t : add) std::printf("%d ", t);
        return;
      }
      std::string all = lm.tok->decode(shown);
      if (drop_space && !all.empty() && all[0] == ' ') all.erase(0, 1);
      if (all.size() > printed.size()) print_piece(all.substr(printed.size()));
      printed = all;
    };
    show(std::vector<int32_t>(prompt.begin() + (skip_bos ? 1 : 0), prompt.end()));
    std::fflush(stdout);
    vq::GenerateOptions go;
    go.steps = o->steps;
    go.temperature = o->temperature;
    go.seed = o->seed;
    go.stop_tokens = lm.stop_tokens();
    const auto t0 = std::chrono::steady_clock::now();
    const auto out = vq::generate(engine, prompt, go, [&](int32_t, int32_t next) {
      show({next});
      std::fflush(stdout);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("\n");
    std::fflush(stdout);     // the text before the statistics line on stderr
    if (g.verbosity >= 1) {  // one line of cache statistics on stderr; -q silences it
      const vq::CacheStats st = engine.stats();
      std::fprintf(stderr,
                   "%zu tokens in %.3f s (%.0f tokens/s, prompt %zu tokens); cache %s holds "
                   "%.0f bytes over %d layers (compression %.2fx vs fp16)\n",
                   out.size(), s, s > 0 ? static_cast<double>(out.size()) / s : 0.0, prompt.size(),
                   cfg.to_string().c_str(), st.kept_bytes,
                   static_cast<int>(model.config().n_layers), st.compression_ratio);
    }
  });
}

}  // namespace vqcli

// `veloxquant generate`: sample text from a model (llama2.c .bin, .gguf or Hugging Face
// directory) with a chosen KV-cache method.
#include <chrono>
#include <memory>

#include "cli_util.hpp"
#include "model_cli.hpp"
#include "veloxquant/model.hpp"

namespace vqcli {

void register_generate(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "generate", "Generate text with a model; every layer's KV cache uses --method");
  struct Opts {
    std::string load = "map";
    std::string model, tokenizer, prompt, text_ids, method = "full";
    int64_t steps = 256;
    float temperature = 0.0f;
    uint64_t seed = 0;
    bool strict_view = false, allow_foreign = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, kModelHelp);
  add_load_option(cmd, o->load);
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
  cmd->add_option("--seed", o->seed, "sampling seed (and cache seed)")->check(seed_validator());
  cmd->add_option("--method", o->method, "KV-cache method spec, e.g. 'curdkv:budget=64'");
  cmd->add_flag("--strict-view", o->strict_view,
                "a token the cache drops at once does not attend to itself (see docs/eval.md)");
  cmd->add_flag("--allow-foreign-calibration", o->allow_foreign,
                "use a kvtc calibration (basis=FILE) measured on another model (a warning "
                "instead of an error)");
  add_threads_option(cmd);
  cmd->callback([o, &g] {
    const vq::CacheConfig cfg = vq::CacheConfig::parse(o->method);
    const LoadedModel lm = load_model(o->model, o->tokenizer, o->text_ids.empty(), o->load);
    const std::string& model_path = lm.model_path;
    const vq::Model& model = lm.model;
    check_calibrations({o->method}, model_path, o->allow_foreign, g);
    vq::EngineOptions eo;
    eo.seed = o->seed;
    eo.strict_view = o->strict_view;
    std::vector<int32_t> prompt;
    if (!o->text_ids.empty())
      prompt = read_text_ids(o->text_ids, model.config().vocab_size);
    else
      prompt = lm.encode_prompt(o->prompt);
    vq::GenerateOptions go;
    go.steps = o->steps;
    go.temperature = o->temperature;
    go.seed = o->seed;
    // The text is printed as it grows (vq::TextStream): the prompt after its BOS, then each token.
    const auto t0 = std::chrono::steady_clock::now();
    const vq::GeneratedText out =
        vq::generate_text(lm, prompt, cfg, eo, go, [](const std::string& piece) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("\n");
    std::fflush(stdout);     // the text before the statistics line on stderr
    if (g.verbosity >= 1) {  // one line of cache statistics on stderr; -q silences it
      const vq::CacheStats& st = out.stats;
      std::fprintf(stderr,
                   "%zu tokens in %.3f s (%.0f tokens/s, prompt %zu tokens); cache %s holds "
                   "%.0f bytes over %d layers (compression %.2fx vs fp16)\n",
                   out.tokens.size(), s, s > 0 ? static_cast<double>(out.tokens.size()) / s : 0.0,
                   prompt.size(), cfg.to_string().c_str(), st.kept_bytes,
                   static_cast<int>(model.config().n_layers), st.compression_ratio);
    }
  });
}

}  // namespace vqcli

// `veloxquant perplexity`: teacher-forced perplexity of a text under one KV-cache method.
#include <memory>

#include "cli_util.hpp"
#include "eval/fidelity.hpp"
#include "model_cli.hpp"
#include "veloxquant/model.hpp"

namespace vqcli {

void register_perplexity(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "perplexity",
      "Teacher-forced perplexity of BOS + the encoded text (split into context-length windows, "
      "each starting with BOS)");
  struct Opts {
    std::string load = "map";
    std::string model, tokenizer, text_file, text_string, text_ids, method = "full", json;
    int64_t max_tokens = 0, prefill = 0;
    uint64_t seed = 0;
    bool strict_view = false, allow_foreign = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, kModelHelp);
  add_load_option(cmd, o->load);
  cmd->add_option("--tokenizer", o->tokenizer, kTokenizerHelp);
  auto* tf = cmd->add_option("--text", o->text_file, "file holding the text");
  auto* ts = cmd->add_option("--text-string", o->text_string, "the text itself");
  auto* ti = cmd->add_option("--text-ids", o->text_ids, kTextIdsHelp);
  tf->excludes(ts);
  ts->excludes(tf);
  ti->excludes(tf);
  ti->excludes(ts);
  cmd->add_option("--method", o->method, "KV-cache method spec (default full)");
  cmd->add_option("--max-tokens", o->max_tokens, "use only the first N text tokens (0 = all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--prefill", o->prefill,
                  "tokens of each window fed through the exact prefill path (0 = all one by one)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--seed", o->seed, "cache seed")->check(seed_validator());
  cmd->add_flag("--strict-view", o->strict_view,
                "a token the cache drops at once does not attend to itself (see docs/eval.md)");
  cmd->add_option("--json", o->json, "write the result as JSON to this file ('-' = stdout)");
  cmd->add_flag("--allow-foreign-calibration", o->allow_foreign,
                "use a kvtc calibration (basis=FILE) measured on another model (a warning "
                "instead of an error)");
  add_threads_option(cmd);
  cmd->callback([o, &g, tf, ts] {
    check_io_paths({{"--model", o->model},
                    {"--tokenizer", o->tokenizer},
                    {"--text", o->text_file},
                    {"--text-ids", o->text_ids}},
                   {{"--json", o->json}});
    // An option given with an empty value is not a missing option: say which it is.
    VQ_CHECK(ts->count() == 0 || !o->text_string.empty(), vq::InvalidArgument,
             "--text-string is empty: there is no text to predict");
    VQ_CHECK(tf->count() == 0 || !o->text_file.empty(), vq::InvalidArgument,
             "--text was given an empty file name");
    VQ_CHECK(!o->text_file.empty() || !o->text_string.empty() || !o->text_ids.empty(),
             vq::InvalidArgument, "perplexity needs --text FILE, --text-string S or --text-ids F");
    const vq::CacheConfig cfg = vq::CacheConfig::parse(o->method);
    const LoadedModel lm = load_model(o->model, o->tokenizer, o->text_ids.empty(), o->load);
    const std::string& model_path = lm.model_path;
    const vq::Model& model = lm.model;
    check_calibrations({o->method}, model_path, o->allow_foreign, g);
    std::vector<int32_t> enc;
    if (!o->text_ids.empty()) {
      enc = read_text_ids(o->text_ids, model.config().vocab_size);
    } else {
      const std::string text = o->text_file.empty() ? o->text_string : read_text_file(o->text_file);
      enc = lm.tok->encode(text, false, false);
    }
    VQ_CHECK(!enc.empty(), vq::InvalidArgument, "the text is empty: nothing to predict");
    const auto windows =
        vq::eval::make_windows(enc, model.config().seq_len, o->max_tokens, lm.bos());
    Progress prog(g, "perplexity", static_cast<int64_t>(windows.size()));
    vq::eval::RunOptions run;
    run.prefill = o->prefill;
    run.seed = o->seed;
    run.strict_view = o->strict_view;
    const vq::eval::MethodResult r = vq::eval::perplexity(
        model, windows, cfg, run, [&](int64_t done, int64_t) { prog.update(done); });
    prog.finish();
    if (o->json != "-") {
      std::printf("method            %s\n", r.spec.c_str());
      std::printf("windows           %zu (context %lld, each starts with BOS)\n", windows.size(),
                  static_cast<long long>(model.config().seq_len));
      std::printf("predicted tokens  %lld\n", static_cast<long long>(r.predicted));
      std::printf("nll (nats, sum)   %.6f\n", r.nll_sum);
      std::printf("perplexity        %.6f\n", r.perplexity);
      std::printf("tokens/s          %.0f\n", r.tokens_per_s);
    }
    if (!o->json.empty())
      write_json(o->json, nlohmann::json{{"model", model_path},
                                         {"method", r.spec},
                                         {"windows", windows.size()},
                                         {"context", model.config().seq_len},
                                         {"predicted_tokens", r.predicted},
                                         {"nll_sum", r.nll_sum},
                                         {"perplexity", r.perplexity},
                                         {"bytes_per_token", r.bytes_per_token},
                                         {"compression_ratio", r.compression_ratio},
                                         {"tokens_per_s", r.tokens_per_s}});
  });
}

}  // namespace vqcli

// `veloxquant eval`: fidelity of KV-cache methods against `full` on a real model. With no
// arguments it runs the default comparison on stories260K + tok512 over the start of
// tinystories-val.txt (files found in $VQ_MODELS_DIR or ../shared/models).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <system_error>

#include "cli_util.hpp"
#include "eval/fidelity.hpp"
#include "eviction/one_shot.hpp"
#include "eviction/one_shot_spec.hpp"
#include "model_cli.hpp"
#include "veloxquant/model.hpp"

namespace vqcli {

namespace {

namespace fs = std::filesystem;

/// Default text tokens: 8 windows of stories260K's context (about 10 s for the default methods
/// on one core).
constexpr int64_t kDefaultMaxTokens = 8 * 511;

using vq::eval::to_json;

std::vector<std::string> split_methods(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(';', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    const size_t a = item.find_first_not_of(" \t\n");
    const size_t b = item.find_last_not_of(" \t\n");
    if (a != std::string::npos) out.push_back(item.substr(a, b - a + 1));
    start = end + 1;
  }
  return out;
}

// scripts/plot_eval.py next to the project root: the current directory or
// two levels above the executable (<root>/<build>/bin/veloxquant).
std::string find_plot_script() {
  std::error_code ec;
  std::vector<fs::path> roots{fs::current_path(ec)};
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) roots.push_back(exe.parent_path().parent_path().parent_path());
  std::vector<fs::path> candidates;
  for (const auto& r : roots) candidates.push_back(r / "scripts" / "plot_eval.py");
  // An installed CLI (<prefix>/bin/veloxquant) finds the copy `cmake --install` puts in
  // <prefix>/share/veloxquant.
  if (!ec)
    candidates.push_back(exe.parent_path().parent_path() / "share" / "veloxquant" / "plot_eval.py");
  for (const auto& p : candidates)
    if (fs::is_regular_file(p, ec)) return p.string();
  VQ_THROW(vq::IoError,
           "--plot: plot_eval.py not found (looked in scripts/ under the current directory and "
           "the project root above the executable, and in <prefix>/share/veloxquant)");
}

// --plot is checked before the evaluation runs, so a missing script or matplotlib costs nothing.
std::string check_plot_ready() {
  const std::string script = find_plot_script();
  const int rc = std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1");
  VQ_CHECK(rc == 0, vq::IoError,
           "--plot needs /usr/bin/python3 with matplotlib (Debian: python3-matplotlib); "
           "'import matplotlib' failed");
  return script;
}

// "0.25,0.5" -> {0.25, 0.5}; every item must be a number (the range is checked by the protocol).
std::vector<double> parse_ratios(const std::string& s) {
  std::vector<double> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(start, end - start);
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    VQ_CHECK(!item.empty() && used == item.size(), vq::InvalidArgument, "--ratios '", s,
             "': item '", item, "' is not a number");
    out.push_back(v);
    start = end + 1;
  }
  return out;
}

nlohmann::json config_json(const vq::ModelConfig& mc) {
  return {{"architecture", mc.architecture}, {"dim", mc.dim},
          {"hidden_dim", mc.hidden_dim},     {"n_layers", mc.n_layers},
          {"n_heads", mc.n_heads},           {"n_kv_heads", mc.n_kv_heads},
          {"head_dim", mc.head_dim()},       {"vocab_size", mc.vocab_size},
          {"seq_len", mc.seq_len},           {"sliding_window", mc.sliding_window}};
}

void print_model_line(const std::string& model_path, const vq::ModelConfig& mc) {
  std::printf(
      "model %s (%s, dim %lld, %lld layers, %lld/%lld heads, head_dim %lld, context %lld)\n",
      model_path.c_str(), mc.architecture.c_str(), static_cast<long long>(mc.dim),
      static_cast<long long>(mc.n_layers), static_cast<long long>(mc.n_heads),
      static_cast<long long>(mc.n_kv_heads), static_cast<long long>(mc.head_dim()),
      static_cast<long long>(mc.seq_len));
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

// `eval --protocol prefill`: the table, the JSON and the plot of run_prefill_protocol.
struct PrefillArgs {
  std::string methods, ratios, json, plot, plot_script;
  int64_t context = 0, continuation = 0, skip_tokens = 0;
  uint64_t seed = 0;
  bool allow_foreign = false, keep_policy = false;
};

void write_plot(const std::string& script, const std::string& json_path, const std::string& png,
                const nlohmann::json& j, const Globals& g, bool quiet);

void run_prefill(const PrefillArgs& a, bool methods_given, const std::string& model_path,
                 const std::string& tok_path, const std::string& text_path, const vq::Model& model,
                 const std::vector<std::vector<int32_t>>& windows, Globals& g) {
  const vq::ModelConfig& mc = model.config();
  vq::eval::PrefillOptions po;
  po.methods = methods_given ? split_methods(a.methods) : vq::eval::default_one_shot_methods();
  VQ_CHECK(!po.methods.empty(), vq::InvalidArgument, "--methods '", a.methods, "' names no method");
  std::vector<std::string> plain;  // the specs without a head-budget prefix, for the checks
  for (const auto& m : po.methods) plain.push_back(vq::eviction::split_head_budget(m).first);
  check_calibrations(plain, model_path, a.allow_foreign, g);
  po.ratios = parse_ratios(a.ratios);
  po.context = a.context;
  po.continuation = a.continuation;
  po.seed = a.seed;
  po.keep_policy = a.keep_policy;
  int64_t runs = 1;
  for (const auto& m : po.methods) {
    runs += vq::eviction::is_codec_alone(m) ? 1 : static_cast<int64_t>(po.ratios.size());
  }
  Progress prog(g, "eval --protocol prefill (window x run)",
                runs * static_cast<int64_t>(windows.size()));
  po.progress = [&](int64_t done, int64_t) { prog.update(done); };
  const vq::eval::PrefillReport rep = vq::eval::run_prefill_protocol(model, windows, po);
  prog.finish();
  const bool json_stdout = a.json == "-";
  if (!json_stdout) {
    print_model_line(model_path, mc);
    std::printf(
        "prefill protocol, text %s: %lld tokens skipped, %lld windows (%lld too short left out), "
        "context %lld, continuation up to %lld, %lld predicted tokens\n",
        text_path.c_str(), static_cast<long long>(a.skip_tokens),
        static_cast<long long>(rep.n_windows), static_cast<long long>(rep.skipped_windows),
        static_cast<long long>(rep.context), static_cast<long long>(rep.continuation),
        static_cast<long long>(rep.predicted_tokens));
    std::printf(
        "KL = mean KL(full || method) over the continuation, nats; ratio = fraction of the "
        "context removed per KV head; B/tok = bytes held per token per layer-head during the "
        "continuation (fp16 = %.0f)\n\n",
        rep.reference.fp16_bytes_per_token);
    Table t({"method", "ratio", "kept", "KL", "top1", "ppl", "dppl", "B/tok", "x fp16"});
    t.add({rep.reference.spec, "0", fmt("%.0f", static_cast<double>(rep.context)), "0", "1",
           fmt("%.4f", rep.reference.perplexity), "+0", fmt("%.2f", rep.reference.bytes_per_token),
           fmt("%.2fx", rep.reference.compression_ratio)});
    for (const auto& r : rep.methods)
      t.add({r.spec, fmt("%.3f", r.evict_ratio), fmt("%.0f", static_cast<double>(r.kept_per_head)),
             fmt("%.5f", r.kl_mean), fmt("%.4f", r.top1_agreement), fmt("%.4f", r.perplexity),
             fmt("%+.4f", r.ppl_delta), fmt("%.2f", r.bytes_per_token),
             fmt("%.2fx", r.compression_ratio)});
    t.print();
  }
  nlohmann::json jm = nlohmann::json::array();
  jm.push_back(to_json(rep.reference));
  for (const auto& r : rep.methods) jm.push_back(to_json(r));
  const nlohmann::json j{{"model", model_path},
                         {"tokenizer", tok_path},
                         {"text", text_path},
                         {"protocol", "prefill"},
                         {"config", config_json(mc)},
                         {"windows", rep.n_windows},
                         {"skipped_windows", rep.skipped_windows},
                         {"context", rep.context},
                         {"continuation", rep.continuation},
                         {"predicted_tokens", rep.predicted_tokens},
                         {"skip_tokens", a.skip_tokens},
                         {"seed", a.seed},
                         {"keep_policy", a.keep_policy},
                         {"ratios", parse_ratios(a.ratios)},
                         {"reference", to_json(rep.reference)},
                         {"methods", jm}};
  if (!a.json.empty()) write_json(a.json, j);
  if (!a.plot.empty()) write_plot(a.plot_script, a.json, a.plot, j, g, json_stdout);
}

void write_plot(const std::string& script, const std::string& json_arg, const std::string& png,
                const nlohmann::json& j, const Globals& g, bool quiet) {
  std::string json_path = json_arg;
  bool temp = false;
  if (json_path.empty() || json_path == "-") {
    json_path =
        (fs::temp_directory_path() / ("veloxquant_eval_" + std::to_string(::getpid()) + ".json"))
            .string();
    write_json(json_path, j);
    temp = true;
  }
  const std::string command = "/usr/bin/python3 " + shell_quote(script) + " " +
                              shell_quote(json_path) + " " + shell_quote(png);
  const int rc = std::system(command.c_str());
  if (temp) {
    std::error_code ec;
    fs::remove(json_path, ec);
  }
  VQ_CHECK(rc == 0, vq::Error, "--plot: '", command, "' failed (status ", rc,
           "); it needs /usr/bin/python3 with matplotlib");
  if (g.verbosity > 0 && !quiet) std::printf("\nplot written to %s\n", png.c_str());
}

void register_eval(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "eval",
      "Fidelity of KV-cache methods against the full cache on a real model: KL, top-1 agreement, "
      "perplexity, bytes held per token, speed. With no options: stories260K + tok512 on "
      "tinystories-val.txt with the default method set");
  struct Opts {
    std::string load = "map";
    std::string model, tokenizer, text, text_ids, methods, json, plot,
        protocol = "decode", ratios = "0.25,0.5,0.75,0.875";
    int64_t context = 0, continuation = 0;
    int64_t max_tokens = kDefaultMaxTokens, prefill = 0, skip_tokens = 0;
    uint64_t seed = 0;
    bool strict_view = false, allow_foreign = false, keep_policy = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, kModelHelp);
  add_load_option(cmd, o->load);
  cmd->add_option("--tokenizer", o->tokenizer, kTokenizerHelp);
  auto* text_opt =
      cmd->add_option("--text", o->text, "evaluation text (default: tinystories-val.txt)");
  cmd->add_option("--text-ids", o->text_ids, kTextIdsHelp)->excludes(text_opt);
  auto* methods_opt = cmd->add_option(
      "--methods", o->methods,
      "method specs separated by ';' (default: full; h2o, h2o with recent=budget/2, "
      "curdkv and curdkv:score=mean at 1/8, 1/4, 1/2 of the context; kvtc and "
      "uniform at 2 and 4 bits per value; q8_0; q4_0)");
  cmd->add_option("--max-tokens", o->max_tokens,
                  "text tokens to evaluate (0 = the whole text; default 4088 = 8 windows of 511)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--skip-tokens", o->skip_tokens,
                  "text tokens to skip before the evaluated part (e.g. the part a calibration "
                  "file was fitted on, so the evaluation is held out)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--prefill", o->prefill,
                  "tokens of each window fed through the exact prefill path (0 = all one by one)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--seed", o->seed, "cache seed")->check(seed_validator());
  cmd->add_option("--protocol", o->protocol,
                  "decode: every window from BOS through the method's decode-time policy "
                  "(default); prefill: kvpress's protocol, the context prefilled exactly, "
                  "compressed once at each --ratios by the method's one-shot scoring, then the "
                  "continuation teacher-forced with no further eviction (docs/eval.md)")
      ->check(CLI::IsMember({"decode", "prefill"}));
  cmd->add_option("--ratios", o->ratios,
                  "prefill protocol: fractions of the context removed per KV head, each in [0, 1) "
                  "(default 0.25,0.5,0.75,0.875)");
  cmd->add_option("--context", o->context,
                  "prefill protocol: context tokens per window, BOS included (0 = 3/4 of the "
                  "model's context)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--continuation", o->continuation,
                  "prefill protocol: continuation tokens teacher-forced after the compression "
                  "(0 = the rest of each window)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_flag("--keep-policy", o->keep_policy,
                "prefill protocol: after the compression keep the method's decode-time policy on, "
                "holding each head to its compressed size through the continuation");
  cmd->add_flag("--strict-view", o->strict_view,
                "a token the cache drops at once does not attend to itself (see docs/eval.md)");
  cmd->add_option("--json", o->json, "write the results as JSON to this file ('-' = stdout)");
  cmd->add_flag("--allow-foreign-calibration", o->allow_foreign,
                "use a kvtc calibration (basis=FILE) measured on another model (a warning "
                "instead of an error)");
  cmd->add_option("--plot", o->plot,
                  "also draw quality vs compression to this PNG (runs /usr/bin/python3 "
                  "scripts/plot_eval.py; needs matplotlib)");
  add_threads_option(cmd);
  cmd->callback([o, &g, methods_opt] {
    check_io_paths({{"--model", o->model},
                    {"--tokenizer", o->tokenizer},
                    {"--text", o->text},
                    {"--text-ids", o->text_ids}},
                   {{"--json", o->json}, {"--plot", o->plot}});
    const std::string plot_script = o->plot.empty() ? std::string() : check_plot_ready();
    const LoadedModel lm = load_model(o->model, o->tokenizer, o->text_ids.empty(), o->load);
    const std::string& model_path = lm.model_path;
    const std::string& tok_path = lm.tokenizer_path;
    const vq::Model& model = lm.model;
    const vq::ModelConfig& mc = model.config();
    std::string text_path;
    const auto windows = text_windows(lm, o->text, o->text_ids, o->skip_tokens, o->max_tokens,
                                      "evaluate", text_path);

    VQ_CHECK(!o->keep_policy || o->protocol == "prefill", vq::InvalidArgument,
             "--keep-policy applies to --protocol prefill (the decode protocol always runs the "
             "method's decode-time policy)");
    if (o->protocol == "prefill") {
      PrefillArgs a{o->methods,  o->ratios,        o->json,         o->plot,
                    plot_script, o->context,       o->continuation, o->skip_tokens,
                    o->seed,     o->allow_foreign, o->keep_policy};
      run_prefill(a, methods_opt->count() > 0, model_path, tok_path, text_path, model, windows, g);
      return;
    }
    vq::eval::FidelityOptions fo;
    // --methods given but empty (or only separators) is a mistake, not a request for the
    // default set.
    fo.methods = methods_opt->count() == 0 ? vq::eval::default_methods(mc.seq_len, mc.head_dim())
                                           : split_methods(o->methods);
    VQ_CHECK(!fo.methods.empty(), vq::InvalidArgument, "--methods '", o->methods,
             "' names no method");
    check_calibrations(fo.methods, model_path, o->allow_foreign, g);
    fo.run.prefill = o->prefill;
    fo.run.seed = o->seed;
    fo.run.strict_view = o->strict_view;
    int64_t runs = 1;  // the reference, then every method that is not `full` itself
    for (const auto& m : fo.methods)
      runs += vq::CacheConfig::parse(m) == vq::CacheConfig::parse("full") ? 0 : 1;
    Progress prog(g, "eval (window x method runs)", runs * static_cast<int64_t>(windows.size()));
    fo.progress = [&](int64_t done, int64_t) { prog.update(done); };
    const vq::eval::FidelityReport rep = vq::eval::run_fidelity(model, windows, fo);
    prog.finish();

    const bool json_stdout = o->json == "-";
    if (!json_stdout) {
      print_model_line(model_path, mc);
      std::printf(
          "text %s: %lld tokens skipped, %lld windows, %lld predicted tokens, prefill %lld\n",
          text_path.c_str(), static_cast<long long>(o->skip_tokens),
          static_cast<long long>(rep.n_windows), static_cast<long long>(rep.predicted_tokens),
          static_cast<long long>(o->prefill));
      std::printf(
          "KL = mean KL(full || method) in nats; top1 = argmax agreement with full; "
          "B/tok = bytes held per token per layer-head (fp16 = %.0f)\n\n",
          rep.reference.fp16_bytes_per_token);
      Table t({"method", "KL", "top1", "ppl", "dppl", "B/tok", "ratio", "ratio@end", "tok/s"});
      for (const auto& r : rep.methods)
        t.add({r.spec, fmt("%.5f", r.kl_mean), fmt("%.4f", r.top1_agreement),
               fmt("%.4f", r.perplexity), fmt("%+.4f", r.ppl_delta), fmt("%.2f", r.bytes_per_token),
               fmt("%.2fx", r.compression_ratio), fmt("%.2fx", r.compression_ratio_final),
               fmt("%.0f", r.tokens_per_s)});
      t.print();
    }
    nlohmann::json jm = nlohmann::json::array();
    for (const auto& r : rep.methods) jm.push_back(to_json(r));
    const nlohmann::json j{{"model", model_path},
                           {"tokenizer", tok_path},
                           {"text", text_path},
                           {"config", config_json(mc)},
                           {"windows", rep.n_windows},
                           {"predicted_tokens", rep.predicted_tokens},
                           {"prefill", o->prefill},
                           {"skip_tokens", o->skip_tokens},
                           {"seed", o->seed},
                           {"strict_view", o->strict_view},
                           {"reference", to_json(rep.reference)},
                           {"methods", jm}};
    if (!o->json.empty()) write_json(o->json, j);
    if (!o->plot.empty()) write_plot(plot_script, o->json, o->plot, j, g, json_stdout);
  });
}

}  // namespace vqcli

// `veloxquant calibrate`: fit a per-model KVTC calibration (.vqcal: PCA basis, variances and
// measured distortion tables per layer / KV head / K-V) on calibration text, for
// `kvtc:basis=<file>`. See docs/kvtc.md, "Calibration".
#include <memory>

#include "cli_util.hpp"
#include "eval/fidelity.hpp"
#include "model_cli.hpp"
#include "veloxquant/calibration.hpp"
#include "veloxquant/model.hpp"

namespace vqcli {

namespace {

/// Default calibration tokens: 40 windows of stories260K's context.
constexpr int64_t kDefaultCalibTokens = 40 * 511;

/// Fraction of an entry's total variance in its top `k` components.
double energy_top(const vq::CalibrationEntry& e, int64_t k) {
  double top = 0, all = 0;
  for (size_t j = 0; j < e.variances.size(); ++j) {
    all += e.variances[j];
    if (static_cast<int64_t>(j) < k) top += e.variances[j];
  }
  return all > 0 ? top / all : 1.0;
}

}  // namespace

void register_calibrate(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "calibrate",
      "Fit a KVTC calibration file (.vqcal) on text: per layer, KV head and K/V a PCA basis, its "
      "variances and the measured quantization error per component and bit width; use it with "
      "kvtc:basis=FILE");
  struct Opts {
    std::string load = "map";
    std::string model, tokenizer, text, text_ids, out, json, rope = "post";
    int64_t max_tokens = kDefaultCalibTokens, skip_tokens = 0, chunk_tokens = 128;
    bool shared_heads = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, kModelHelp);
  add_load_option(cmd, o->load);
  cmd->add_option("--tokenizer", o->tokenizer, kTokenizerHelp);
  auto* text_opt =
      cmd->add_option("--text", o->text, "calibration text (default: tinystories-val.txt)");
  cmd->add_option("--text-ids", o->text_ids, kTextIdsHelp)->excludes(text_opt);
  cmd->add_option("--out", o->out, "the .vqcal file to write")->required();
  cmd->add_option("--max-tokens", o->max_tokens,
                  "text tokens to calibrate on (0 = the rest of the text; default 20440)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--skip-tokens", o->skip_tokens,
                  "text tokens to skip first (keep calibration and evaluation text disjoint)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--rope", o->rope, "capture keys after RoPE (post) or before it (pre)")
      ->check(CLI::IsMember({"post", "pre"}));
  cmd->add_flag("--shared-heads", o->shared_heads,
                "one basis per layer and K/V for all KV heads (rows pooled)");
  cmd->add_option("--chunk-tokens", o->chunk_tokens,
                  "chunk size the measured per-chunk distortion assumes (match kvtc chunk_tokens)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--json", o->json, "also write a summary as JSON to this file ('-' = stdout)");
  add_threads_option(cmd);
  cmd->callback([o, &g] {
    VQ_CHECK(!o->out.empty(), vq::InvalidArgument, "--out is empty; name the .vqcal file to write");
    check_io_paths({{"--model", o->model},
                    {"--tokenizer", o->tokenizer},
                    {"--text", o->text},
                    {"--text-ids", o->text_ids}},
                   {{"--out", o->out}, {"--json", o->json}});
    const LoadedModel lm = load_model(o->model, o->tokenizer, o->text_ids.empty(), o->load);
    const std::string& model_path = lm.model_path;
    const vq::Model& model = lm.model;
    std::string text_path;
    const auto windows = text_windows(lm, o->text, o->text_ids, o->skip_tokens, o->max_tokens,
                                      "calibrate on", text_path);

    vq::CalibrateOptions co;
    co.rope = o->rope == "pre" ? vq::RopeMode::Pre : vq::RopeMode::Post;
    co.shared_heads = o->shared_heads;
    co.chunk_tokens = o->chunk_tokens;
    Progress prog(g, "calibrate (windows)", static_cast<int64_t>(windows.size()));
    co.progress = [&](int64_t done, int64_t) { prog.update(done); };
    vq::Calibration cal = vq::calibrate_model(model, windows, co);
    prog.finish();
    cal.model_id = vq::model_digest(model_path);  // checked by every command that uses the file
    cal.verified_id = 0;
    cal.save(o->out);
    const uint64_t id = cal.id();

    const int64_t D = cal.head_dim;
    const int64_t k4 = std::max<int64_t>(1, D / 4), k2 = std::max<int64_t>(1, D / 2);
    nlohmann::json layers = nlohmann::json::array();
    for (int64_t l = 0; l < cal.n_layers; ++l) {
      nlohmann::json jl{{"layer", l}};
      for (int kv = 0; kv < 2; ++kv) {
        double e1 = 0, e4 = 0, e2 = 0;
        for (int64_t gi = 0; gi < cal.groups(); ++gi) {
          const auto& e = cal.entries[static_cast<size_t>((l * cal.groups() + gi) * 2 + kv)];
          e1 += energy_top(e, 1);
          e4 += energy_top(e, k4);
          e2 += energy_top(e, k2);
        }
        const double n = static_cast<double>(cal.groups());
        jl[kv == 0 ? "keys" : "values"] = {
            {"energy_top1", e1 / n}, {"energy_top_quarter", e4 / n}, {"energy_top_half", e2 / n}};
      }
      layers.push_back(jl);
    }
    const bool json_stdout = o->json == "-";
    if (!json_stdout && g.verbosity > 0) {
      std::printf(
          "calibration %s (id %016llx): %s, %lld tokens (%lld skipped), rope=%s, %s, "
          "chunk_tokens %lld\n",
          o->out.c_str(), static_cast<unsigned long long>(id), model_path.c_str(),
          static_cast<long long>(cal.tokens), static_cast<long long>(o->skip_tokens),
          vq::rope_mode_name(cal.rope), cal.shared_heads ? "shared across heads" : "per head",
          static_cast<long long>(cal.chunk_tokens));
      std::printf(
          "variance fraction in the top 1, %lld and %lld of %lld components (mean over "
          "heads)\n",
          static_cast<long long>(k4), static_cast<long long>(k2), static_cast<long long>(D));
      Table t({"layer", "K top1", "K top" + std::to_string(k4), "K top" + std::to_string(k2),
               "V top1", "V top" + std::to_string(k4), "V top" + std::to_string(k2)});
      for (const auto& jl : layers)
        t.add({std::to_string(jl["layer"].get<int64_t>()),
               fmt("%.3f", jl["keys"]["energy_top1"].get<double>()),
               fmt("%.3f", jl["keys"]["energy_top_quarter"].get<double>()),
               fmt("%.3f", jl["keys"]["energy_top_half"].get<double>()),
               fmt("%.3f", jl["values"]["energy_top1"].get<double>()),
               fmt("%.3f", jl["values"]["energy_top_quarter"].get<double>()),
               fmt("%.3f", jl["values"]["energy_top_half"].get<double>())});
      t.print();
    }
    if (!o->json.empty()) {
      char idhex[17];
      std::snprintf(idhex, sizeof idhex, "%016llx", static_cast<unsigned long long>(id));
      write_json(o->json, {{"out", o->out},
                           {"id", idhex},
                           {"model", model_path},
                           {"tokenizer", lm.tokenizer_path},
                           {"text", text_path},
                           {"skip_tokens", o->skip_tokens},
                           {"tokens", cal.tokens},
                           {"windows", windows.size()},
                           {"rope", vq::rope_mode_name(cal.rope)},
                           {"shared_heads", cal.shared_heads},
                           {"chunk_tokens", cal.chunk_tokens},
                           {"n_layers", cal.n_layers},
                           {"n_kv_heads", cal.n_kv_heads},
                           {"head_dim", cal.head_dim},
                           {"layers", layers}});
    }
  });
}

}  // namespace vqcli

// `veloxquant bench engine`: prefill / decode tokens/s of random Llama-shaped models in memory,
// each row with its ratio to the bandwidth or FMA bound measured in the same run.
#include <algorithm>

#include "cli_util.hpp"
#include "eval/bench_engine.hpp"

namespace vqcli {

void register_bench_engine(CLI::App& bench, Globals& g) {
  auto* cmd = bench.add_subcommand(
      "engine",
      "Prefill/decode tok/s of random 1B-shaped models vs measured bandwidth and FMA peak");
  struct Opts {
    vq::bench::EngineBenchOptions e;
    std::string json;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--json", o->json,
                  "write {benchmark, limits, models, rows} JSON to this file ('-' = stdout)");
  cmd->add_option("--shape", o->e.shape, "model shape: 1b or tiny")->capture_default_str();
  cmd->add_option("--weights", o->e.weights, "weight types (f32, f16, bf16, q8_0, q4_k)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--contexts", o->e.contexts, "context lengths of the decode rows")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--methods", o->e.methods, "cache specs of the decode rows (';'-separated)")
      ->delimiter(';')
      ->capture_default_str();
  cmd->add_option("--prefill-tokens", o->e.prefill_tokens, "tokens of the timed prefill")
      ->capture_default_str();
  cmd->add_option("--decode-steps", o->e.decode_steps, "timed decode steps per method per round")
      ->capture_default_str();
  cmd->add_option("--rounds", o->e.rounds,
                  "decode rounds per context, the methods' steps taking turns in each")
      ->capture_default_str();
  cmd->add_option("--seed", o->e.seed, "weights and tokens seed")
      ->capture_default_str()
      ->check(seed_validator());
  add_threads_option(cmd);
  cmd->callback([o, &g] {
    check_io_paths({}, {{"--json", o->json}});
    o->e.progress = [&](const std::string& what) {
      if (g.verbosity >= 1) std::fprintf(stderr, "bench engine: %s\n", what.c_str());
    };
    const auto res = vq::bench::run_engine_bench(o->e);
    const auto& lim = res.limits;
    const double gb = 1e9;
    if (o->json != "-") {
      std::printf(
          "threads %d, stream copy %.2f GB/s (2 x %.0f MiB%s; %.2f before the rows, %.2f "
          "after, the largest of these and the copies around each decode group is the run's "
          "bound; a decode row's own bound is the larger copy around its rounds), stream read %.2f "
          "GB/s (%.2f before, %.2f after), "
          "fma peak %.1f GFLOP/s (%s)\n",
          lim.threads, lim.bandwidth / gb, lim.copy_bytes / (1024.0 * 1024.0),
          lim.huge_pages ? " advised for 2 MiB pages" : "", lim.bandwidth_start / gb,
          lim.bandwidth_end / gb, lim.read_bandwidth / gb, lim.read_start / gb, lim.read_end / gb,
          lim.fma_flops / gb, lim.fma_kernel.c_str());
      for (const auto& m : res.models) {
        const std::string huge =
            m.huge_page_bytes < 0
                ? std::string("unknown")
                : std::to_string(static_cast<int64_t>(m.huge_page_bytes / (1024.0 * 1024.0))) +
                      " MiB";
        std::printf(
            "model %s: %.3g params, %.1f MiB of weights (%s on 2 MiB pages), built in "
            "%.1f s\n",
            m.weights.c_str(), m.params, m.weight_bytes / (1024.0 * 1024.0), huge.c_str(),
            m.build_seconds);
      }
    }
    Table t({"weights", "row", "method", "context", "tok/s", "rounds' tok/s", "MB/token", "GFLOP/s",
             "local GB/s", "bound ratio", "run ratio", "read ratio", "vs full", "goal", "met"});
    nlohmann::json jrows = nlohmann::json::array();
    for (const auto& r : res.rows) {
      if (!r.error.empty()) {
        t.add({r.weights, r.kind, r.method, std::to_string(r.context), "-", "-", "-", "-", "-", "-",
               "-", "-", "-", "-", r.error});
        jrows.push_back({{"weights", r.weights},
                         {"kind", r.kind},
                         {"method", r.method},
                         {"context", r.context},
                         {"error", r.error}});
        continue;
      }
      const bool decode = r.kind == "decode";
      std::string spread = "-";
      if (!r.round_tokens_per_s.empty()) {
        const auto [lo, hi] =
            std::minmax_element(r.round_tokens_per_s.begin(), r.round_tokens_per_s.end());
        spread = fmt("%.1f", *lo) + "-" + fmt("%.1f", *hi);
      }
      t.add({r.weights, r.kind, r.method, std::to_string(r.context), fmt("%.1f", r.tokens_per_s),
             spread, decode ? fmt("%.1f", (r.weight_bytes + r.kv_bytes) / 1e6) : "-",
             decode ? "-" : fmt("%.1f", r.flops / r.seconds / gb),
             decode ? fmt("%.1f", r.local_bandwidth / gb) : "-", fmt("%.3f", r.bound_ratio),
             decode ? fmt("%.3f", r.run_bound_ratio) : "-",
             decode ? fmt("%.3f", r.read_ratio) : "-",
             decode && r.vs_full > 0 ? fmt("%.2f", r.vs_full) : "-", r.goal,
             r.goal_met ? "yes" : "no"});
      nlohmann::json j{{"weights", r.weights},
                       {"kind", r.kind},
                       {"method", r.method},
                       {"context", r.context},
                       {"tokens", r.tokens},
                       {"seconds", r.seconds},
                       {"tokens_per_s", r.tokens_per_s},
                       {"bound_ratio", r.bound_ratio},
                       {"goal", r.goal},
                       {"goal_met", r.goal_met}};
      if (decode) {
        j["weight_bytes_per_token"] = r.weight_bytes;
        j["kv_bytes_per_token"] = r.kv_bytes;
        j["bytes_per_token"] = r.weight_bytes + r.kv_bytes;
        j["bound"] = "stream_copy_bandwidth";
        j["local_bound_bytes_per_s"] = r.local_bandwidth;
        j["run_bound_ratio"] = r.run_bound_ratio;
        j["read_ratio"] = r.read_ratio;
        j["round_tokens_per_s"] = r.round_tokens_per_s;
        if (r.vs_full > 0) j["vs_full"] = r.vs_full;
      } else {
        j["flops"] = r.flops;
        j["flops_per_s"] = r.flops / r.seconds;
        j["bound"] = "fma_peak";
      }
      jrows.push_back(j);
    }
    if (o->json != "-") t.print();
    nlohmann::json jmodels = nlohmann::json::array();
    for (const auto& m : res.models)
      jmodels.push_back({{"weights", m.weights},
                         {"params", m.params},
                         {"weight_bytes", m.weight_bytes},
                         {"build_seconds", m.build_seconds},
                         {"huge_page_bytes", m.huge_page_bytes}});
    if (!o->json.empty())
      write_json(o->json, nlohmann::json{{"benchmark", "engine"},
                                         {"shape", o->e.shape},
                                         {"decode_steps", o->e.decode_steps},
                                         {"rounds", o->e.rounds},
                                         {"prefill_tokens", o->e.prefill_tokens},
                                         {"limits",
                                          {{"threads", lim.threads},
                                           {"copy_array_bytes", lim.copy_bytes},
                                           {"huge_pages", lim.huge_pages},
                                           {"stream_copy_bytes_per_s", lim.bandwidth},
                                           {"stream_copy_start_bytes_per_s", lim.bandwidth_start},
                                           {"stream_copy_end_bytes_per_s", lim.bandwidth_end},
                                           {"stream_copy_probes_bytes_per_s", lim.bandwidth_probes},
                                           {"stream_read_bytes_per_s", lim.read_bandwidth},
                                           {"stream_read_start_bytes_per_s", lim.read_start},
                                           {"stream_read_end_bytes_per_s", lim.read_end},
                                           {"fma_peak_flops_per_s", lim.fma_flops},
                                           {"fma_kernel", lim.fma_kernel}}},
                                         {"models", jmodels},
                                         {"rows", jrows}});
    std::vector<vq::bench::EngineRow> decode;
    for (const auto& r : res.rows)
      if (r.kind == "decode") decode.push_back(r);
    refuse_if_all_failed("bench engine: decode", decode);
  });
}

}  // namespace vqcli

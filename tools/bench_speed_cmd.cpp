// `veloxquant bench speed`: speed of eviction, codecs (one thread) and generation (--threads).
#include "cli_util.hpp"
#include "eval/bench_speed.hpp"
#include "veloxquant/threads.hpp"

namespace vqcli {

void register_bench_speed(CLI::App& bench, Globals& g) {
  auto* cmd = bench.add_subcommand(
      "speed", "Per-token cost vs attention, codec MB/s vs zstd and q8_0/q4_0, generate tok/s");
  struct Opts {
    vq::bench::SpeedOptions s;
    std::string json;
    bool quick = false;
    std::string only;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--json", o->json, "write {benchmark, rows} JSON to this file ('-' = stdout)");
  cmd->add_option("--min-seconds", o->s.min_seconds, "time budget per row")
      ->check(CLI::Range(0.0, 60.0));
  cmd->add_option("--ns", o->s.ns, "cache sizes n for the eviction rows");
  auto* dims = cmd->add_option("--dims", o->s.dims, "head dims D for the eviction rows");
  cmd->add_option("--kv", o->s.kv_path,
                  "eviction rows on real keys/values: a dump-kv .npy [layers, 2, kv_heads, "
                  "tokens, head_dim], every (layer, head) a stream, times averaged over them "
                  "(D is the file's)")
      ->excludes(dims);
  cmd->add_option("--evict-methods", o->s.evict_methods,
                  "eviction method ids timed (default: every eviction method)")
      ->delimiter(',');
  cmd->add_option("--only", o->only, "one group: attention, eviction, layer, codec or generate")
      ->check(CLI::IsMember({"attention", "eviction", "layer", "codec", "generate"}));
  cmd->add_option("--models", o->s.models_dir, "directory holding stories260K.bin");
  cmd->add_option("--model", o->s.model_path,
                  "the generate rows' model: a llama2.c .bin, a .gguf or a Hugging Face "
                  "directory (default: stories260K.bin)");
  add_threads_option(cmd);
  cmd->callback([o, &g] {
    check_io_paths({{"--kv", o->s.kv_path}}, {{"--json", o->json}});
    if (!o->only.empty()) {
      o->s.eviction = o->only == "eviction";
      o->s.layer = o->only == "layer";
      o->s.attention = o->only == "attention";
      o->s.codec = o->only == "codec";
      o->s.generate = o->only == "generate";
    }
    Progress progress(g, "bench speed", 0);
    o->s.progress = [&](const std::string& what) {
      if (g.verbosity > 1) std::fprintf(stderr, "bench speed: %s\n", what.c_str());
    };
    const auto rows = vq::bench::run_speed_bench(o->s);
    Table t({"group", "name", "n", "D", "value", "unit", "ratio", "vs", "note"});
    nlohmann::json jrows = nlohmann::json::array();
    for (const auto& r : rows) {
      t.add({r.group, r.name, std::to_string(r.n), std::to_string(r.D), fmt("%.1f", r.value),
             r.unit, fmt("%.2f", r.ratio), r.ratio_to, r.note});
      jrows.push_back({{"group", r.group},
                       {"name", r.name},
                       {"n", r.n},
                       {"D", r.D},
                       {"value", r.value},
                       {"unit", r.unit},
                       {"ratio", r.ratio},
                       {"ratio_to", r.ratio_to},
                       {"note", r.note}});
    }
    if (o->json != "-") t.print();
    if (!o->json.empty())
      write_json(
          o->json,
          nlohmann::json{{"benchmark", "speed"}, {"threads", vq::thread_count()}, {"rows", jrows}});
  });
}

}  // namespace vqcli

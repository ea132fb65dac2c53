// `veloxquant bench memory`: reported vs counted vs peak-RSS bytes of every method's cache.
#include "cli_util.hpp"
#include "eval/bench_memory.hpp"

namespace vqcli {

void register_bench_memory(CLI::App& bench, Globals& g) {
  auto* cmd = bench.add_subcommand(
      "memory", "Bytes each cache reports, allocates and adds to peak RSS, vs the fp16 size");
  struct Opts {
    vq::bench::MemoryOptions m;
    std::string json;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--json", o->json, "write {benchmark, rows} JSON to this file ('-' = stdout)");
  cmd->add_option("--heads", o->m.heads, "KV heads")->capture_default_str();
  cmd->add_option("--query-heads", o->m.query_heads, "query heads (a multiple of --heads)")
      ->capture_default_str();
  cmd->add_option("--tokens", o->m.tokens, "tokens fed to each cache")->capture_default_str();
  cmd->add_option("--dim", o->m.dim, "head_dim D")->capture_default_str();
  cmd->add_option("--update", o->m.update, "tokens per update call")->capture_default_str();
  cmd->add_option("--budget", o->m.budget, "budget of the eviction methods in the default set")
      ->capture_default_str();
  cmd->add_option("--methods", o->m.specs,
                  "specs to measure (default: every method + compositions)")
      ->delimiter(';');
  cmd->callback([o, &g] {
    check_io_paths({}, {{"--json", o->json}});
    o->m.progress = [&](const std::string& what) {
      if (g.verbosity >= 1) std::fprintf(stderr, "bench memory: %s\n", what.c_str());
    };
    const auto rows = vq::bench::run_memory_bench(o->m);
    Table t({"spec", "kept tok", "reported MiB", "counted MiB", "counted/rep", "peak RSS MiB",
             "fp16 MiB", "ratio", "content", "params", "policy", "index", "thread scratch", "s"});
    nlohmann::json jrows = nlohmann::json::array();
    const double mib = 1024.0 * 1024.0;
    for (const auto& r : rows) {
      if (!r.error.empty()) {
        t.add({r.spec, "-", "-", "-", "-", "-", fmt("%.1f", r.fp16_bytes / mib), "-", "-", "-", "-",
               "-", "-", r.error});
        jrows.push_back({{"spec", r.spec}, {"error", r.error}});
        continue;
      }
      t.add({r.spec, std::to_string(r.tokens_kept), fmt("%.2f", r.reported / mib),
             fmt("%.2f", r.counted / mib), fmt("%.3f", r.reported > 0 ? r.counted / r.reported : 0),
             fmt("%.1f", r.rss / mib), fmt("%.1f", r.fp16_bytes / mib),
             fmt("%.2f", r.reported > 0 ? r.fp16_bytes / r.reported : 0),
             fmt("%.2f", r.content / mib), fmt("%.2f", r.params / mib), fmt("%.2f", r.policy / mib),
             fmt("%.2f", r.index / mib), fmt("%.2f", r.scratch / mib), fmt("%.1f", r.seconds)});
      jrows.push_back({{"spec", r.spec},
                       {"tokens_kept", r.tokens_kept},
                       {"reported_bytes", r.reported},
                       {"counted_bytes", r.counted},
                       {"thread_scratch_bytes", r.scratch},
                       {"peak_rss_growth_bytes", r.rss},
                       {"fp16_bytes", r.fp16_bytes},
                       {"content_bytes", r.content},
                       {"codec_param_bytes", r.params},
                       {"policy_bytes", r.policy},
                       {"index_bytes", r.index},
                       {"overhead_bytes", r.overhead},
                       {"stored_bytes", r.stored},
                       {"seconds", r.seconds}});
    }
    if (o->json != "-") t.print();
    if (!o->json.empty())
      write_json(o->json, nlohmann::json{{"benchmark", "memory"},
                                         {"heads", o->m.heads},
                                         {"query_heads", o->m.query_heads},
                                         {"tokens", o->m.tokens},
                                         {"dim", o->m.dim},
                                         {"update", o->m.update},
                                         {"rows", jrows}});
    refuse_if_all_failed("bench memory", rows);
  });
}

}  // namespace vqcli

// `veloxquant bench curdkv`: the spec's class-2 retention benchmark, CurDKV vs H2O.
#include "cli_util.hpp"
#include "eval/bench_curdkv.hpp"

namespace vqcli {

void register_bench_curdkv(CLI::App& bench, Globals& g) {
  auto* cmd = bench.add_subcommand(
      "curdkv", "Class-2 (value-irrelevant) retention of CurDKV vs H2O on two-class geometries");
  struct Opts {
    vq::bench::CurdkvBenchOptions b;
    std::string json;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--seeds", o->b.n_seeds, "data seeds per configuration")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--head-dim", o->b.head_dim, "head dimension D")->check(CLI::Range(1, 4096));
  cmd->add_option("--curdkv-options", o->b.curdkv_extra,
                  "extra curdkv options, e.g. 'score=mean' or 'solver=reference'");
  cmd->add_option("--json", o->json, "write {benchmark, rows} JSON to this file ('-' = stdout)");
  cmd->callback([o, &g] {
    check_io_paths({}, {{"--json", o->json}});
    const auto rows = vq::bench::run_curdkv_bench(o->b);
    Table t({"geometry", "seq_len", "budget", "method", "class2_retention", "ms"});
    nlohmann::json jrows = nlohmann::json::array();
    for (const auto& r : rows) {
      t.add({r.geometry, std::to_string(r.seq_len), std::to_string(r.budget), r.method,
             fmt("%.3f", r.class2_retention), fmt("%.3f", r.ms)});
      jrows.push_back({{"geometry", r.geometry},
                       {"seq_len", r.seq_len},
                       {"budget", r.budget},
                       {"method", r.method},
                       {"class2_retention", r.class2_retention},
                       {"ms", r.ms}});
    }
    if (o->json != "-") {
      t.print();
      // Means over the whole sweep, per geometry and method (the spec's headline numbers).
      for (const std::string geo : {"planted_value_divergence", "correlated"}) {
        for (const std::string m : {"curdkv", "h2o"}) {
          double s = 0;
          int n = 0;
          for (const auto& r : rows)
            if (r.geometry == geo && r.method == m) s += r.class2_retention, ++n;
          if (n)
            std::printf("mean class2_retention %-26s %-7s %.3f\n", geo.c_str(), m.c_str(), s / n);
        }
      }
    }
    if (!o->json.empty())
      write_json(o->json, nlohmann::json{{"benchmark", "curdkv"}, {"rows", jrows}});
    (void)g;
  });
}

}  // namespace vqcli

// `veloxquant bench kernels`: stored-type matrix kernels vs fp32 weights (see
// src/eval/bench_kernels.hpp).
#include "cli_util.hpp"
#include "eval/bench_kernels.hpp"
#include "veloxquant/threads.hpp"

namespace vqcli {

void register_bench_kernels(CLI::App& bench, Globals& g) {
  auto* cmd = bench.add_subcommand(
      "kernels",
      "Matrix-vector / matrix-matrix time of every stored weight type vs fp32 (--threads)");
  struct Opts {
    vq::bench::KernelOptions k;
    std::string json;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--rows", o->k.rows, "weight rows (outputs)")->capture_default_str();
  cmd->add_option("--cols", o->k.cols, "weight columns (inputs; a multiple of 256)")
      ->capture_default_str();
  cmd->add_option("--batch", o->k.batch, "rows of the matrix-matrix (prefill) product")
      ->capture_default_str();
  cmd->add_option("--repeats", o->k.repeats, "timed repeats (the best is kept)")
      ->capture_default_str();
  cmd->add_option("--types", o->k.types, "types to measure (default: all)")->delimiter(';');
  cmd->add_option("--json", o->json, "write {benchmark, rows} JSON to this file ('-' = stdout)");
  add_threads_option(cmd);
  cmd->callback([o, &g] {
    check_io_paths({}, {{"--json", o->json}});
    (void)g;
    const auto rows = vq::bench::run_kernel_bench(o->k);
    Table t({"type", "bits/w", "matvec us", "vs F32", "matvec_ref us", "matmul us", "vs F32"});
    nlohmann::json jr = nlohmann::json::array();
    for (const auto& r : rows) {
      t.add({r.type, fmt("%.2f", r.bits_per_weight), fmt("%.1f", r.matvec_us),
             fmt("%.2fx", r.matvec_vs_f32), fmt("%.1f", r.matvec_ref_us), fmt("%.1f", r.matmul_us),
             fmt("%.2fx", r.matmul_vs_f32)});
      jr.push_back({{"type", r.type},
                    {"bits_per_weight", r.bits_per_weight},
                    {"matvec_us", r.matvec_us},
                    {"matvec_ref_us", r.matvec_ref_us},
                    {"matmul_us", r.matmul_us},
                    {"matvec_vs_f32", r.matvec_vs_f32},
                    {"matmul_vs_f32", r.matmul_vs_f32}});
    }
    if (o->json != "-") t.print();
    if (!o->json.empty())
      write_json(o->json, nlohmann::json{{"benchmark", "kernels"},
                                         {"rows_out", o->k.rows},
                                         {"cols", o->k.cols},
                                         {"batch", o->k.batch},
                                         {"threads", vq::thread_count()},
                                         {"rows", jr}});
  });
}

}  // namespace vqcli

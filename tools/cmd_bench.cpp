// `veloxquant bench <name>`: the benchmark programs. Each lives in its own file and is listed in
// bench_commands.inc.
#include "cli_util.hpp"

namespace vqcli {
#define VQ_BENCH(name) void register_bench_##name(CLI::App& bench, Globals& g);
#include "bench_commands.inc"
#undef VQ_BENCH

void register_bench(CLI::App& app, Globals& g) {
  auto* bench = app.add_subcommand("bench", "Run a benchmark and print its table (and JSON)");
  bench->require_subcommand(1);
#define VQ_BENCH(name) register_bench_##name(*bench, g);
#include "bench_commands.inc"
#undef VQ_BENCH
}

}  // namespace vqcli

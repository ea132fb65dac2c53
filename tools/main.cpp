// veloxquant: the command-line tool. Each subcommand lives in its own file and is listed in
// commands.inc. Exit status: 0 success, 1 user error (one line on stderr), 2 internal error.
#include <cstdio>
#include <exception>
#include <string>

#include "cli_util.hpp"

namespace vqcli {
#define VQ_COMMAND(name) void register_##name(CLI::App& app, Globals& g);
#include "commands.inc"
#undef VQ_COMMAND
}  // namespace vqcli

int main(int argc, char** argv) {
  vqcli::Globals globals;
  CLI::App app{
      "VeloxQuant: KV-cache compression for LLM inference (token eviction and transform "
      "coding).\nMethods are named by spec strings such as 'curdkv:budget=512,n_sink=4' or "
      "'kvtc:bit_budget=256';\nrun 'veloxquant methods' for the list.",
      "veloxquant"};
  app.require_subcommand(1);
  // --help shows every option's default (options inherit this from the app).
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", "veloxquant 0.1.0");
  app.add_flag_callback(
      "-q,--quiet", [&] { globals.verbosity = 0; }, "only errors on stderr");
  app.add_flag_callback(
      "-v,--verbose", [&] { globals.verbosity = 2; }, "more detail on stderr");
#define VQ_COMMAND(name) vqcli::register_##name(app, globals);
#include "commands.inc"
#undef VQ_COMMAND
  // An unknown word where the subcommand goes: name it (CLI11 would say "A subcommand is
  // required", which reads as if nothing had been typed).
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-q" || a == "--quiet" || a == "-v" || a == "--verbose") continue;
    if (!a.empty() && a[0] == '-') break;  // --help, --version, or an error CLI11 reports
    bool known = false;
    std::string names;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      known |= sub->get_name() == a;
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "veloxquant: error: unknown command '%s'; commands: %s (see --help)\n",
                   a.c_str(), names.c_str());
      return 1;
    }
    break;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "veloxquant: error: %s\n", e.what());
    return 1;
  } catch (const vq::Error& e) {
    std::fprintf(stderr, "veloxquant: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "veloxquant: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}

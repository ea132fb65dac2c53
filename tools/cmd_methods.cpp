// `veloxquant methods`: list the registry.
#include "cli_util.hpp"
#include "veloxquant/registry.hpp"

namespace vqcli {

static std::string range_of(const vq::OptionSpec& o) {
  using vq::OptionType;
  switch (o.type) {
    case OptionType::Int:
    case OptionType::IntList:
      return "[" + std::to_string(static_cast<long long>(o.min)) + ", " +
             std::to_string(static_cast<long long>(o.max)) + "]";
    case OptionType::Float:
      return "[" + fmt("%g", o.min) + ", " + fmt("%g", o.max) + "]";
    case OptionType::Bool:
      return "true|false";
    case OptionType::Choice: {
      std::string s;
      for (const auto& c : o.choices) s += (s.empty() ? "" : "|") + c;
      return s;
    }
    case OptionType::String:
      return "text";
  }
  return "";
}

void register_methods(CLI::App& app, Globals&) {
  auto* cmd = app.add_subcommand("methods", "List every registered method with its options");
  auto json_path = std::make_shared<std::string>();
  cmd->add_option("--json", *json_path, "also write the list as JSON to this file ('-' = stdout)");
  cmd->callback([json_path] {
    check_io_paths({}, {{"--json", *json_path}});
    nlohmann::json arr = nlohmann::json::array();
    const bool json_stdout = *json_path == "-";
    for (const auto& m : vq::methods()) {
      nlohmann::json jm{
          {"id", m.id}, {"family", vq::family_name(m.family)}, {"description", m.description}};
      nlohmann::json opts = nlohmann::json::array();
      if (!json_stdout)
        std::printf("%-14s %-10s %s\n", m.id.c_str(), vq::family_name(m.family),
                    m.description.c_str());
      for (const auto& o : m.options) {
        opts.push_back({{"name", o.name},
                        {"type", vq::option_type_name(o.type)},
                        {"default", o.default_value},
                        {"range", range_of(o)},
                        {"help", o.help}});
        if (!json_stdout)
          std::printf("    %-12s = %-14s %-22s %s\n", o.name.c_str(), o.default_value.c_str(),
                      range_of(o).c_str(), o.help.c_str());
      }
      jm["options"] = opts;
      jm["composable"] =
          m.family == vq::Family::Eviction ? "policy" : (m.make_row_codec ? "codec" : "");
      arr.push_back(jm);
    }
    const char* compose =
        "Compose any eviction policy with any codec as 'policy[:opts]+codec[:opts]', e.g. "
        "'snapkv:budget=256+q4_0' or 'h2o:budget=128,recent=64+kvtc:bit_budget=24': the policy "
        "decides which tokens stay, the codec how each kept token is stored.";
    if (!json_stdout) std::printf("\n%s\n", compose);
    if (!json_path->empty())
      write_json(*json_path, nlohmann::json{{"methods", arr}, {"composition", compose}});
  });
}

}  // namespace vqcli

// `veloxquant info FILE.vqkv`: the header, the bytes of every section and the compression ratio.
// Every checksum is verified; a damaged file is reported as an error (exit 1).
#include "cli_util.hpp"
#include "model_info.hpp"
#include "veloxquant/vqkv.hpp"

namespace vqcli {

void register_info(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "info",
      "Show a .vqkv file's header, bytes per section and compression ratio; or a model's "
      "(.gguf, Hugging Face directory, .safetensors) architecture, shapes, types and tokenizer; or "
      "a llama2.c checkpoint's header");
  struct Opts {
    std::string in, json;
    bool no_sections = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("input", o->in, ".vqkv file, .gguf, .safetensors or Hugging Face model directory")
      ->required();
  cmd->add_flag("--summary", o->no_sections, "omit the per-section table");
  cmd->add_option("--json", o->json, "write the same information as JSON ('-' = stdout)");
  cmd->callback([o, &g] {
    check_io_paths({{"input", o->in}}, {{"--json", o->json}});
    if (is_model_file(o->in)) {
      print_model_info(o->in, o->json, o->no_sections);
      return;
    }
    if (is_llama2c_checkpoint(o->in)) {
      print_llama2c_info(o->in, o->json);
      return;
    }
    const std::vector<uint8_t> file = vq::read_file_bytes(o->in);
    vq::VqkvIndex idx;
    try {
      idx = vq::vqkv_parse(file.data(), file.size());
    } catch (const vq::FormatError& e) {
      VQ_THROW(vq::FormatError, o->in, ": ", e.what());
    }
    const vq::VqkvHeader& h = idx.header;
    const int64_t numel = h.numel();
    const double fp16 = 2.0 * static_cast<double>(numel);
    const double source =
        static_cast<double>(numel * static_cast<int64_t>(vq::npy_dtype_size(h.source_dtype)));
    const double bytes = static_cast<double>(idx.file_bytes);
    uint64_t kind_bytes[3] = {0, 0, 0};
    nlohmann::json secs = nlohmann::json::array();
    Table t({"#", "layer", "kind", "head", "offset", "bytes", "xxh64"});
    for (size_t i = 0; i < idx.sections.size(); ++i) {
      const vq::VqkvSection& s = idx.sections[i];
      kind_bytes[static_cast<int>(s.kind)] += s.size;
      char sum[17];
      std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(s.checksum));
      t.add({std::to_string(i), std::to_string(s.layer), vq::vqkv_kind_name(s.kind),
             s.head < 0 ? "all" : std::to_string(s.head), std::to_string(s.offset),
             std::to_string(s.size), sum});
      secs.push_back({{"layer", s.layer},
                      {"kind", vq::vqkv_kind_name(s.kind)},
                      {"head", s.head},
                      {"offset", s.offset},
                      {"bytes", s.size},
                      {"xxh64", sum}});
    }
    nlohmann::json j{{"file", o->in},
                     {"format_version", h.version},
                     {"layout", vq::vqkv_layout_name(h.layout)},
                     {"shape", h.shape()},
                     {"source_dtype", vq::npy_dtype_name(h.source_dtype)},
                     {"method", h.spec},
                     {"L", h.L},
                     {"H", h.H},
                     {"S", h.S},
                     {"D", h.D},
                     {"file_bytes", idx.file_bytes},
                     {"header_bytes", idx.header_bytes},
                     {"section_count", idx.sections.size()},
                     {"fp16_bytes", fp16},
                     {"source_bytes", source},
                     {"compression_ratio", bytes > 0 ? fp16 / bytes : 1.0},
                     {"compression_ratio_vs_source", bytes > 0 ? source / bytes : 1.0},
                     {"bits_per_value", numel > 0 ? 8.0 * bytes / static_cast<double>(numel) : 0}};
    if (h.layout == vq::VqkvLayout::L2HSD) {
      j["key_bytes"] = kind_bytes[1];
      j["value_bytes"] = kind_bytes[2];
    }
    if (!o->no_sections) j["sections"] = secs;
    if (o->json != "-") {
      std::printf("file            %s (%llu bytes, format version %u, checksums OK)\n",
                  o->in.c_str(), static_cast<unsigned long long>(idx.file_bytes),
                  static_cast<unsigned>(h.version));
      std::printf("method          %s\n", h.spec.c_str());
      std::printf("shape           %s %s, source dtype %s\n",
                  vq::NpyArray{h.source_dtype, h.shape(), {}}.shape_str().c_str(),
                  vq::vqkv_layout_name(h.layout), vq::npy_dtype_name(h.source_dtype));
      std::printf("header + table  %llu bytes, %zu sections\n",
                  static_cast<unsigned long long>(idx.header_bytes), idx.sections.size());
      if (h.layout == vq::VqkvLayout::L2HSD)
        std::printf("keys / values   %llu / %llu bytes\n",
                    static_cast<unsigned long long>(kind_bytes[1]),
                    static_cast<unsigned long long>(kind_bytes[2]));
      std::printf("ratio           %.2fx vs fp16 (%.0f bytes), %.2fx vs %s; %.3f bits/value\n",
                  j["compression_ratio"].get<double>(), fp16,
                  j["compression_ratio_vs_source"].get<double>(),
                  vq::npy_dtype_name(h.source_dtype), j["bits_per_value"].get<double>());
      if (!o->no_sections) {
        std::printf("\n");
        t.print();
      }
    }
    if (!o->json.empty()) write_json(o->json, j);
    (void)g;
  });
}

}  // namespace vqcli

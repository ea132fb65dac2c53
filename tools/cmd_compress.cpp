// `veloxquant compress` and `veloxquant decompress`: .npy <-> .vqkv with any transform method.
#include <cmath>
#include <cstdio>

#include "cli_util.hpp"
#include "io/vqkv.hpp"
#include "veloxquant/npy.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/tensor.hpp"
#include "veloxquant/vqkv.hpp"

namespace vqcli {

namespace {

// RMS error, max abs error and relative error (RMSE / RMS of the input) of y against x.
nlohmann::json error_of(const std::vector<float>& x, const std::vector<float>& y) {
  double se = 0, ss = 0, mx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(y[i]) - static_cast<double>(x[i]);
    se += d * d;
    ss += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    mx = std::max(mx, std::abs(d));
  }
  const double n = x.empty() ? 1.0 : static_cast<double>(x.size());
  return {
      {"mse", se / n}, {"max_abs_error", mx}, {"relative_rmse", ss > 0 ? std::sqrt(se / ss) : 0.0}};
}

std::string shape_str(const std::vector<int64_t>& s) {
  return vq::NpyArray{vq::NpyDtype::Float32, s, {}}.shape_str();
}

using vq::vqkv::index_str;

// float16 holds |x| <= 65504 (anything from 65520 on rounds to Inf). Refuse values beyond it,
// naming the first and the count, or clamp them when asked.
void fit_float16(std::vector<float>& v, const std::vector<int64_t>& shape, bool clamp,
                 const Globals& g) {
  constexpr float kMax = 65504.0f;
  int64_t count = 0, first = -1;
  for (size_t i = 0; i < v.size(); ++i)
    if (std::isinf(vq::round_to_fp16(v[i]))) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++count;
      if (clamp) v[i] = v[i] > 0 ? kMax : -kMax;
    }
  if (count == 0) return;
  const double x = clamp ? 0.0 : static_cast<double>(v[static_cast<size_t>(first)]);
  VQ_CHECK(clamp, vq::InvalidArgument, "--dtype float16: value ", x, " at ",
           index_str(first, shape), " (and ", count - 1,
           " more) is outside float16's range [-65504, 65504] and would be written as Inf; use "
           "--dtype float32 or bfloat16, or --clamp to clamp");
  if (g.verbosity > 0)
    std::fprintf(stderr,
                 "veloxquant: warning: --clamp: %lld value(s) beyond float16's range, first at "
                 "%s, clamped to +-65504\n",
                 static_cast<long long>(count), index_str(first, shape).c_str());
}

}  // namespace

void register_compress(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "compress",
      "Compress an .npy array [S, D], [H, S, D], [L, H, S, D] or [L, 2, H, S, D] (K and V) into "
      "a .vqkv file with a transform method");
  struct Opts {
    std::string method, in, out, json;
    bool bf16 = false, verify = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--method,-m", o->method, "transform method spec, e.g. 'kvtc:bit_budget=128'")
      ->required();
  cmd->add_option("input", o->in, "input .npy (float16, float32, float64, or bfloat16 as '<u2')")
      ->required();
  cmd->add_option("output", o->out, "output .vqkv ('-' = stdout)")->required();
  cmd->add_flag("--bfloat16", o->bf16, "read a '<u2' input as bfloat16 bit patterns");
  cmd->add_flag("--verify", o->verify, "decode the result and report the reconstruction error");
  cmd->add_option("--json", o->json, "write the result as JSON to this file ('-' = stdout)");
  cmd->callback([o, &g] {
    const vq::CacheConfig config = vq::CacheConfig::parse(o->method);
    const vq::MethodInfo& m = vq::find_method(config.method());
    VQ_CHECK(m.family == vq::Family::Transform, vq::InvalidArgument, "method '", m.id,
             "' is an eviction method; compress needs a transform method (see 'veloxquant "
             "methods')");
    check_io_paths({{"input", o->in}}, {{"output", o->out}, {"--json", o->json}});
    vq::NpyReadOptions ro;
    ro.u2_as_bfloat16 = o->bf16;
    const vq::NpyArray in = vq::read_npy(o->in, ro);
    VQ_CHECK(vq::npy_is_float(in.dtype), vq::InvalidArgument, o->in, ": dtype ",
             vq::npy_dtype_name(in.dtype),
             " is not a float type; compress takes float16, float32, float64, or bfloat16 "
             "stored as '<u2' with --bfloat16");
    const std::vector<float> x = in.to_float();
    vq::VqkvStats st;
    // Progress counts (layer, K/V) blocks.
    int64_t blocks = 1;
    if (in.shape.size() >= 4) blocks = in.shape[0] * (in.shape.size() == 5 ? 2 : 1);
    Progress progress(g, "compress", blocks);
    const std::vector<uint8_t> file =
        vq::vqkv_compress(x.data(), in.shape, config, in.dtype, &st,
                          [&](int64_t done, int64_t) { progress.update(done); });
    progress.finish();
    nlohmann::json j{{"input", o->in},
                     {"output", o->out},
                     {"method", vq::vqkv_parse(file.data(), file.size()).header.spec},
                     {"shape", in.shape},
                     {"source_dtype", vq::npy_dtype_name(in.dtype)},
                     {"file_bytes", st.file_bytes},
                     {"section_bytes", st.section_bytes},
                     {"pre_entropy_bytes", st.pre_entropy_bytes},
                     {"source_bytes", st.source_bytes},
                     {"fp16_bytes", st.fp16_bytes},
                     {"compression_ratio", st.compression_ratio()},
                     {"bits_per_value", st.fp16_bytes > 0 ? 16.0 / st.compression_ratio() : 0.0},
                     {"breakdown",
                      {{"basis", st.breakdown.basis},
                       {"params", st.breakdown.params},
                       {"payload", st.breakdown.payload},
                       {"table", st.breakdown.table},
                       {"raw", st.breakdown.raw}}}};
    if (o->verify) {  // before anything is written: a file that fails to decode is never left
      const vq::VqkvArray back = vq::vqkv_decompress(file.data(), file.size());
      j["error"] = error_of(x, back.values);
    }
    write_output(o->out, file);
    // The summary goes to stdout unless stdout carries the file or the JSON.
    std::FILE* say = o->out == "-" ? stderr : stdout;
    if (g.verbosity > 0 && o->json != "-") {
      std::fprintf(
          say, "%s %s %s -> %s: %lld bytes (fp16 %lld bytes), ratio %.2fx, %.3f bits/value\n",
          o->in.c_str(), shape_str(in.shape).c_str(), vq::npy_dtype_name(in.dtype), o->out.c_str(),
          static_cast<long long>(st.file_bytes), static_cast<long long>(st.fp16_bytes),
          st.compression_ratio(), j["bits_per_value"].get<double>());
      if (g.verbosity >= 2)
        std::fprintf(
            say,
            "bytes: basis %lld, params %lld, payload %lld, code tables %lld, raw %lld, "
            "header + table %lld; without entropy coding the sections would take %lld\n",
            static_cast<long long>(st.breakdown.basis), static_cast<long long>(st.breakdown.params),
            static_cast<long long>(st.breakdown.payload),
            static_cast<long long>(st.breakdown.table), static_cast<long long>(st.breakdown.raw),
            static_cast<long long>(st.file_bytes - st.section_bytes),
            static_cast<long long>(st.pre_entropy_bytes));
      if (o->verify)
        std::fprintf(say, "reconstruction: relative RMSE %.4g, MSE %.4g, max |error| %.4g\n",
                     j["error"]["relative_rmse"].get<double>(), j["error"]["mse"].get<double>(),
                     j["error"]["max_abs_error"].get<double>());
    }
    if (!o->json.empty()) write_json(o->json, j);
  });
}

void register_decompress(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("decompress", "Decode a .vqkv file back into an .npy array");
  struct Opts {
    std::string in, out, dtype = "source", json;
    bool clamp = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("input", o->in, "input .vqkv")->required();
  cmd->add_option("output", o->out, "output .npy ('-' = stdout)")->required();
  cmd->add_option("--dtype", o->dtype,
                  "dtype of the output: 'source' (what was compressed), float32, float16, "
                  "bfloat16")
      ->check(CLI::IsMember({"source", "float32", "float16", "bfloat16"}))
      ->capture_default_str();
  cmd->add_flag("--clamp", o->clamp,
                "with a float16 output, clamp values beyond +-65504 to +-65504 (with a warning) "
                "instead of refusing");
  cmd->add_option("--json", o->json, "write a summary as JSON to this file ('-' = stdout)");
  cmd->callback([o, &g] {
    check_io_paths({{"input", o->in}}, {{"output", o->out}, {"--json", o->json}});
    const std::vector<uint8_t> file = vq::read_file_bytes(o->in);
    vq::VqkvArray a;
    try {
      a = vq::vqkv_decompress(file.data(), file.size());
    } catch (const vq::FormatError& e) {
      VQ_THROW(vq::FormatError, o->in, ": ", e.what());
    }
    vq::NpyDtype t = a.header.source_dtype;
    if (o->dtype == "float32") t = vq::NpyDtype::Float32;
    if (o->dtype == "float16") t = vq::NpyDtype::Float16;
    if (o->dtype == "bfloat16") t = vq::NpyDtype::BFloat16;
    if (t == vq::NpyDtype::Float16) fit_float16(a.values, a.shape, o->clamp, g);
    write_output(o->out, vq::encode_npy(vq::npy_from_float(a.values.data(), a.shape, t)));
    if (g.verbosity > 0 && o->json != "-")
      std::fprintf(o->out == "-" ? stderr : stdout, "%s -> %s %s %s (%s)\n", o->in.c_str(),
                   o->out.c_str(), shape_str(a.shape).c_str(), vq::npy_dtype_name(t),
                   a.header.spec.c_str());
    if (!o->json.empty())
      write_json(o->json, {{"input", o->in},
                           {"output", o->out},
                           {"shape", a.shape},
                           {"dtype", vq::npy_dtype_name(t)},
                           {"method", a.header.spec}});
  });
}

}  // namespace vqcli

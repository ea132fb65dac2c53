// `veloxquant bench kvtc`: the spec's matched-budget distortion benchmark, kvtc vs the fixed
// uniform and SVDq-split allocations, plus the fitted distortion curve behind the DP's beta.
#include <algorithm>
#include <map>

#include "cli_util.hpp"
#include "coding/distortion_fit.hpp"
#include "eval/bench_kvtc.hpp"

namespace vqcli {

void register_bench_kvtc(CLI::App& bench, Globals& g) {
  auto* cmd = bench.add_subcommand(
      "kvtc", "KVTC (DP bit allocation) vs uniform and SVDq-split at matched bit budgets");
  struct Opts {
    vq::bench::KvtcBenchOptions b;
    std::string json;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--seeds", o->b.n_seeds, "data seeds per configuration")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--head-dim", o->b.head_dim,
                  "head dimension D; the budgets are 2 and 4 bits per value (2 D and 4 D bits per "
                  "token: 64 and 128 at the default 32)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--kvtc-options", o->b.kvtc_extra,
                  "extra kvtc options, e.g. 'alloc=waterfill' or 'chunk_tokens=64'");
  cmd->add_option("--json", o->json, "write {benchmark, rows, fitted_beta} JSON ('-' = stdout)");
  cmd->callback([o, &g] {
    check_io_paths({}, {{"--json", o->json}});
    o->b.budgets = {2 * o->b.head_dim, 4 * o->b.head_dim};
    const auto rows = vq::bench::run_kvtc_bench(o->b);
    const vq::coding::DistortionFit fit = vq::coding::fit_distortion_curve();
    nlohmann::json jrows = nlohmann::json::array();
    Table t({"geometry", "seq_len", "budget", "arm", "mse", "cosine", "bytes", "pre_entropy",
             "ec_gain", "ratio", "kept", "ms"});
    for (const auto& r : rows) {
      t.add({r.geometry, std::to_string(r.seq_len), std::to_string(r.bit_budget), r.arm,
             fmt("%.4g", r.mse), fmt("%.5f", r.cosine), fmt("%.0f", r.bytes),
             fmt("%.0f", r.pre_entropy_bytes), fmt("%.3f", r.entropy_coding_gain),
             fmt("%.2f", r.compression_ratio), fmt("%.1f", r.kept_components), fmt("%.3f", r.ms)});
      jrows.push_back({{"geometry", r.geometry},
                       {"seq_len", r.seq_len},
                       {"bit_budget", r.bit_budget},
                       {"arm", r.arm},
                       {"mse", r.mse},
                       {"cosine", r.cosine},
                       {"bytes", r.bytes},
                       {"kvtc_bytes", r.bytes},
                       {"pre_entropy_bytes", r.pre_entropy_bytes},
                       {"entropy_coding_gain", r.entropy_coding_gain},
                       {"compression_ratio", r.compression_ratio},
                       {"kept_components", r.kept_components},
                       {"ms", r.ms}});
    }
    if (o->json != "-") {
      t.print();
      std::printf(
          "\nfitted distortion curve of the affine quantizer on N(0,1) blocks of 128: "
          "MSE(b) = %.4f * %.4f^-b (the DP uses beta from its options, default 3.5)\n",
          fit.alpha, fit.beta);
      for (size_t k = 0; k < fit.bits.size(); ++k)
        std::printf("  b=%d measured %.6g fitted %.6g\n", fit.bits[k], fit.measured_mse[k],
                    fit.fitted_mse[k]);
      // The acceptance ratios, per (seq_len, budget).
      std::map<std::tuple<std::string, int64_t, int64_t, std::string>, double> mse;
      for (const auto& r : rows) mse[{r.geometry, r.seq_len, r.bit_budget, r.arm}] = r.mse;
      auto get = [&](const std::string& geo, int64_t S, int64_t B, const std::string& arm) {
        auto it = mse.find({geo, S, B, arm});
        return it == mse.end() ? -1.0 : it->second;
      };
      std::printf("\n");
      for (int64_t S : o->b.seq_lens)
        for (int64_t B : o->b.budgets) {
          const double k = get("skewed_variance", S, B, "kvtc");
          const double u = get("skewed_variance", S, B, "uniform");
          const double s = get("skewed_variance", S, B, "svdq_split");
          if (k > 0 && u >= 0 && s >= 0)
            std::printf(
                "skewed_variance S=%lld B=%lld: uniform/kvtc = %.1fx, svdq_split/kvtc = %.1fx\n",
                static_cast<long long>(S), static_cast<long long>(B), u / k, s / k);
          const double kf = get("flat", S, B, "kvtc");
          const double uf = get("flat", S, B, "uniform");
          if (kf >= 0 && uf > 0)
            std::printf("flat            S=%lld B=%lld: kvtc/uniform = %.2fx\n",
                        static_cast<long long>(S), static_cast<long long>(B), kf / uf);
        }
    }
    if (!o->json.empty()) {
      nlohmann::json curve = nlohmann::json::array();
      for (size_t k = 0; k < fit.bits.size(); ++k)
        curve.push_back({{"bits", fit.bits[k]},
                         {"measured_mse", fit.measured_mse[k]},
                         {"fitted_mse", fit.fitted_mse[k]}});
      write_json(o->json, nlohmann::json{{"benchmark", "kvtc"},
                                         {"rows", jrows},
                                         {"fitted_alpha", fit.alpha},
                                         {"fitted_beta", fit.beta},
                                         {"distortion_curve", curve}});
    }
    (void)g;
  });
}

}  // namespace vqcli

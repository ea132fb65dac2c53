#include "eval/bench_curdkv.hpp"

#include <chrono>

#include "core/rng.hpp"
#include "eval/bench_options.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/errors.hpp"

namespace vq::bench {

TwoClassData make_two_class(const std::string& geometry, int64_t seq_len, int64_t head_dim,
                            uint64_t seed) {
  VQ_CHECK(geometry == "planted_value_divergence" || geometry == "correlated", InvalidArgument,
           "unknown geometry '", geometry, "'; use planted_value_divergence or correlated");
  VQ_CHECK(seq_len >= 2 && head_dim >= 1, InvalidArgument, "seq_len = ", seq_len,
           " must be >= 2 and head_dim = ", head_dim, " >= 1");
  const int64_t S = seq_len, D = head_dim;
  Rng rng(seed);
  std::vector<double> base(static_cast<size_t>(D));
  double norm = 0;
  for (auto& b : base) {
    b = rng.normal();
    norm += b * b;
  }
  norm = std::sqrt(norm);
  for (auto& b : base) b /= norm;

  // Token t (in generation order) belongs to class 1 for t < S/2, class 2 otherwise.
  std::vector<std::vector<float>> gk(static_cast<size_t>(S)), gv(static_cast<size_t>(S));
  std::vector<int> gcls(static_cast<size_t>(S));
  const bool planted = geometry == "planted_value_divergence";
  for (int64_t t = 0; t < S; ++t) {
    const int cls = t < S / 2 ? 1 : 2;
    gcls[static_cast<size_t>(t)] = cls;
    auto& k = gk[static_cast<size_t>(t)];
    auto& v = gv[static_cast<size_t>(t)];
    k.resize(static_cast<size_t>(D));
    v.resize(static_cast<size_t>(D));
    if (planted) {
      for (int64_t d = 0; d < D; ++d)
        k[static_cast<size_t>(d)] =
            static_cast<float>(base[static_cast<size_t>(d)] + 0.01 * rng.normal());
      const double vs = cls == 1 ? 5.0 : 0.001;
      for (int64_t d = 0; d < D; ++d)
        v[static_cast<size_t>(d)] = static_cast<float>(vs * rng.normal());
    } else {
      const double imp = cls == 1 ? rng.uniform(3.0, 5.0) : rng.uniform(0.05, 0.3);
      for (int64_t d = 0; d < D; ++d)
        k[static_cast<size_t>(d)] =
            static_cast<float>(imp * base[static_cast<size_t>(d)] + 0.02 * rng.normal());
      for (int64_t d = 0; d < D; ++d)
        v[static_cast<size_t>(d)] = static_cast<float>(imp * rng.normal());
    }
  }
  const std::vector<int64_t> order = rng.permutation(S);
  TwoClassData out;
  out.keys = Tensor(1, 1, S, D);
  out.values = Tensor(1, 1, S, D);
  out.class_of.resize(static_cast<size_t>(S));
  for (int64_t p = 0; p < S; ++p) {
    const size_t t = static_cast<size_t>(order[static_cast<size_t>(p)]);
    for (int64_t d = 0; d < D; ++d) {
      out.keys.at(0, 0, p, d) = round_to_fp16(gk[t][static_cast<size_t>(d)]);
      out.values.at(0, 0, p, d) = round_to_fp16(gv[t][static_cast<size_t>(d)]);
    }
    out.class_of[static_cast<size_t>(p)] = gcls[t];
  }
  return out;
}

std::vector<int64_t> stream_and_keep(const std::string& spec, const TwoClassData& data) {
  auto cache = make_cache(spec, data.keys.D());
  // The whole sequence in one call: prefill goes through the same token-by-token loop.
  cache->update(data.keys, data.values);
  return cache->fetch().positions;
}

std::vector<CurdkvRow> run_curdkv_bench(const CurdkvBenchOptions& opt) {
  std::vector<CurdkvRow> rows;
  for (const auto& geo : opt.geometries) {
    for (int64_t S : opt.seq_lens) {
      for (int64_t budget : opt.budgets) {
        for (const std::string method : {"curdkv", "h2o"}) {
          check_extra_options("curdkv bench", opt.curdkv_extra, {"budget", "n_sink"});
          std::string spec = method + ":budget=" + std::to_string(budget) + ",n_sink=0";
          if (method == "curdkv" && !opt.curdkv_extra.empty()) spec += "," + opt.curdkv_extra;
          double retention = 0, ms = 0;
          for (int64_t seed = 0; seed < opt.n_seeds; ++seed) {
            const TwoClassData data =
                make_two_class(geo, S, opt.head_dim, static_cast<uint64_t>(seed));
            const auto t0 = std::chrono::steady_clock::now();
            const std::vector<int64_t> kept = stream_and_keep(spec, data);
            const auto t1 = std::chrono::steady_clock::now();
            ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
            int64_t c2 = 0;
            for (int64_t p : kept) c2 += data.class_of[static_cast<size_t>(p)] == 2;
            retention +=
                kept.empty() ? 0.0 : static_cast<double>(c2) / static_cast<double>(kept.size());
          }
          rows.push_back(CurdkvRow{geo, S, budget, method,
                                   retention / static_cast<double>(opt.n_seeds),
                                   ms / static_cast<double>(opt.n_seeds)});
        }
      }
    }
  }
  return rows;
}

}  // namespace vq::bench

#include "eval/bench_kvtc.hpp"

#include "codecs/pca_codec.hpp"
#include "eviction/eviction_cache.hpp"

#include <chrono>
#include <cmath>

#include "core/rng.hpp"
#include "eval/bench_options.hpp"
#include "transform/pca_coder.hpp"
#include "transform/transform_cache.hpp"
#include "veloxquant/errors.hpp"

namespace vq::bench {

Tensor make_kvtc_geometry(const std::string& geometry, int64_t seq_len, int64_t head_dim,
                          uint64_t seed) {
  VQ_CHECK(geometry == "skewed_variance" || geometry == "flat", InvalidArgument,
           "unknown kvtc geometry '", geometry, "'; use skewed_variance or flat");
  VQ_CHECK(seq_len >= 1 && head_dim >= 1, InvalidArgument, "seq_len = ", seq_len,
           " and head_dim = ", head_dim, " must both be >= 1");
  const int64_t S = seq_len, D = head_dim;
  Rng rng(seed);
  Tensor x(1, 1, S, D);
  if (geometry == "flat") {
    for (int64_t t = 0; t < S; ++t)
      for (int64_t d = 0; d < D; ++d)
        x.at(0, 0, t, d) = round_to_fp16(static_cast<float>(rng.normal()));
    return x;
  }
  constexpr int64_t kRank = 6;
  std::vector<double> M(static_cast<size_t>(kRank * D));
  for (int64_t i = 0; i < kRank; ++i)
    for (int64_t d = 0; d < D; ++d)
      M[static_cast<size_t>(i * D + d)] = rng.normal() * 20.0 / static_cast<double>(i + 1);
  std::vector<double> z(static_cast<size_t>(S * kRank));
  for (auto& v : z) v = rng.normal();
  for (int64_t t = 0; t < S; ++t)
    for (int64_t d = 0; d < D; ++d) {
      double s = 0;
      for (int64_t i = 0; i < kRank; ++i)
        s += z[static_cast<size_t>(t * kRank + i)] * M[static_cast<size_t>(i * D + d)];
      x.at(0, 0, t, d) = static_cast<float>(s);
    }
  for (int64_t t = 0; t < S; ++t)
    for (int64_t d = 0; d < D; ++d)
      x.at(0, 0, t, d) = round_to_fp16(x.at(0, 0, t, d) + static_cast<float>(0.05 * rng.normal()));
  return x;
}

Reconstruction measure_reconstruction(const Tensor& keys, const Tensor& values,
                                      const FetchResult& got) {
  VQ_CHECK(got.keys.shape() == keys.shape() && got.values.shape() == values.shape(),
           InvalidArgument, "measure_reconstruction: the cache returned ", got.keys.shape().str(),
           " for input ", keys.shape().str(), "; every token must be kept");
  double err = 0, cos = 0;
  int64_t rows = 0;
  const int64_t D = keys.D();
  for (int which = 0; which < 2; ++which) {
    const Tensor& a = which == 0 ? keys : values;
    const Tensor& b = which == 0 ? got.keys : got.values;
    for (int64_t bb = 0; bb < a.B(); ++bb)
      for (int64_t h = 0; h < a.H(); ++h)
        for (int64_t t = 0; t < a.S(); ++t) {
          const float* x = a.row(bb, h, t);
          const float* y = b.row(bb, h, t);
          double xy = 0, xx = 0, yy = 0;
          for (int64_t d = 0; d < D; ++d) {
            const double e = static_cast<double>(x[d]) - y[d];
            err += e * e;
            xy += static_cast<double>(x[d]) * y[d];
            xx += static_cast<double>(x[d]) * x[d];
            yy += static_cast<double>(y[d]) * y[d];
          }
          cos += (xx > 0 && yy > 0) ? xy / std::sqrt(xx * yy) : (xx == yy ? 1.0 : 0.0);
          ++rows;
        }
  }
  Reconstruction r;
  r.mse = err / static_cast<double>(rows * D);
  r.cosine = cos / static_cast<double>(rows);
  return r;
}

std::vector<KvtcRow> run_kvtc_bench(const KvtcBenchOptions& opt) {
  VQ_CHECK(opt.n_seeds >= 1, InvalidArgument, "kvtc bench: n_seeds = ", opt.n_seeds,
           " must be >= 1");
  check_extra_options("kvtc bench", opt.kvtc_extra, {"bit_budget"});
  std::vector<KvtcRow> rows;
  for (const auto& geo : opt.geometries)
    for (int64_t S : opt.seq_lens)
      for (int64_t budget : opt.budgets)
        for (const auto& arm : opt.arms) {
          std::string spec = arm + ":bit_budget=" + std::to_string(budget);
          if (arm == "kvtc" && !opt.kvtc_extra.empty()) spec += "," + opt.kvtc_extra;
          KvtcRow row;
          row.geometry = geo;
          row.seq_len = S;
          row.bit_budget = budget;
          row.arm = arm;
          for (int64_t seed = 0; seed < opt.n_seeds; ++seed) {
            const Tensor K =
                make_kvtc_geometry(geo, S, opt.head_dim, static_cast<uint64_t>(2 * seed));
            const Tensor V =
                make_kvtc_geometry(geo, S, opt.head_dim, static_cast<uint64_t>(2 * seed + 1));
            auto cache = make_cache(spec, opt.head_dim);
            const auto t0 = std::chrono::steady_clock::now();
            const FetchResult got = cache->update_and_fetch(K, V);
            const auto t1 = std::chrono::steady_clock::now();
            const Reconstruction rec = measure_reconstruction(K, V, got);
            const CacheStats st = cache->stats();
            row.mse += rec.mse;
            row.cosine += rec.cosine;
            row.bytes += st.get("kvtc_bytes");
            row.pre_entropy_bytes += st.get("pre_entropy_bytes");
            row.entropy_coding_gain += st.get("entropy_coding_gain");
            row.compression_ratio += st.compression_ratio;
            row.ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
            if (auto* ec = dynamic_cast<const eviction::EvictionCache*>(cache.get()))
              if (auto* pc =
                      dynamic_cast<const codecs::PcaCodec*>(&ec->head_state(0, 0).kv.codec(0)))
                row.kept_components += static_cast<double>(pc->kept());
          }
          const double n = static_cast<double>(opt.n_seeds);
          row.mse /= n;
          row.cosine /= n;
          row.bytes /= n;
          row.pre_entropy_bytes /= n;
          row.entropy_coding_gain /= n;
          row.compression_ratio /= n;
          row.kept_components /= n;
          row.ms /= n;
          rows.push_back(row);
        }
  return rows;
}

}  // namespace vq::bench

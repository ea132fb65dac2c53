// `veloxquant evict`: stream [H, S, D] keys/values (and optional queries) through an eviction
// cache, the first --prefill tokens in one update and the rest one token per update, then write
// the kept positions of every head as an int64 .npy [H, n_kept] (ascending per head). Lets anyone
// check our eviction decisions against their own implementation of a method.
#include <algorithm>
#include <tuple>
#include <utility>

#include "cli_util.hpp"
#include "eviction/one_shot.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/npy.hpp"
#include "veloxquant/registry.hpp"

namespace vqcli {

namespace {

// An [H, S, D] float .npy as a tensor [1, H, S, D].
vq::Tensor read_hsd(const std::string& path, const char* what) {
  const vq::NpyArray a = vq::read_npy(path);
  VQ_CHECK(a.shape.size() == 3, vq::InvalidArgument, what, " ", path, ": shape ", a.shape_str(),
           " is not [H, S, D]");
  VQ_CHECK(vq::npy_is_float(a.dtype), vq::InvalidArgument, what, " ", path, ": dtype ",
           vq::npy_dtype_name(a.dtype), " is not a float type");
  const std::vector<float> x = a.to_float();
  return vq::Tensor::from_fp32(x.data(), 1, a.shape[0], a.shape[1], a.shape[2]);
}

// Layer `layer` of an [L, 2, H, S, D] float .npy (what dump-kv writes) as keys and values
// [1, H, S, D].
std::pair<vq::Tensor, vq::Tensor> read_kv_layer(const std::string& path, int64_t layer) {
  const vq::NpyArray a = vq::read_npy(path);
  VQ_CHECK(a.shape.size() == 5 && a.shape[1] == 2, vq::InvalidArgument, "--kv ", path, ": shape ",
           a.shape_str(), " is not [L, 2, H, S, D] (what dump-kv writes)");
  VQ_CHECK(vq::npy_is_float(a.dtype), vq::InvalidArgument, "--kv ", path, ": dtype ",
           vq::npy_dtype_name(a.dtype), " is not a float type");
  const int64_t L = a.shape[0], H = a.shape[2], S = a.shape[3], D = a.shape[4];
  VQ_CHECK(layer < L, vq::InvalidArgument, "--layer ", layer, " is outside [0, ", L - 1,
           "]: ", path, " holds ", L, " layer(s)");
  const std::vector<float> x = a.to_float();
  const size_t block = static_cast<size_t>(H * S * D);
  const float* k = x.data() + static_cast<size_t>(2 * layer) * block;
  return {vq::Tensor::from_fp32(k, 1, H, S, D), vq::Tensor::from_fp32(k + block, 1, H, S, D)};
}

}  // namespace

void register_evict(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "evict",
      "Stream [H, S, D] keys/values through an eviction cache and write the kept positions "
      "[H, n_kept] (int64, ascending; -1 pads heads that keep fewer)");
  struct Opts {
    std::string method, keys, values, kv, queries, out, json;
    int64_t prefill = 0, layer = 0;
    double compress_ratio = -1;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--method,-m", o->method, "eviction method spec, e.g. 'curdkv:budget=64'")
      ->required();
  auto* keys = cmd->add_option("--keys", o->keys, "keys .npy [H, S, D]");
  auto* values = cmd->add_option("--values", o->values, "values .npy [H, S, D]");
  auto* kv = cmd->add_option("--kv", o->kv,
                             "instead of --keys/--values: a KV file [L, 2, H, S, D] as dump-kv "
                             "writes it, with --layer");
  cmd->add_option("--layer", o->layer, "layer of the --kv file to use")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  kv->excludes(keys)->excludes(values);
  cmd->add_option("--queries", o->queries,
                  "queries .npy [Hq, S, D], Hq a multiple of H (for methods that use them)");
  auto* prefill = cmd->add_option("--prefill", o->prefill,
                                  "tokens passed in the first update (the rest go one at a time)")
                      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  auto* ratio_opt =
      cmd->add_option("--compress-ratio", o->compress_ratio,
                      "one-shot compression (kvpress's protocol): all S tokens are the context, "
                      "scored once by the method's one-shot rule; each head keeps "
                      "max(1, int(S * (1 - R))) tokens. R in [0, 1). The method may carry an "
                      "'adakv/' prefix (head-adaptive budgets)")
          ->excludes(prefill);
  cmd->add_option("--out,-o", o->out,
                  "output .npy of kept positions [H, n_kept], int64 ('-' = stdout)")
      ->required();
  cmd->add_option("--json", o->json, "write a summary as JSON ('-' = stdout)");
  cmd->callback([o, ratio_opt, &g] {
    // given at all (even as -1, which is not a ratio): one-shot, and the ratio is checked
    const bool one_shot = ratio_opt->count() > 0;
    vq::eviction::OneShotSpec spec;
    if (one_shot) {
      spec = vq::eviction::parse_one_shot(o->method);
      vq::eviction::one_shot_keep(1, o->compress_ratio);  // refuses R outside [0, 1)
    }
    const vq::CacheConfig config = one_shot ? spec.method : vq::CacheConfig::parse(o->method);
    const vq::MethodInfo& m = vq::find_method(config.method());
    VQ_CHECK(m.family == vq::Family::Eviction, vq::InvalidArgument, "method '", m.id,
             "' is a transform method; evict needs an eviction method (see 'veloxquant "
             "methods')");
    check_io_paths(
        {{"--keys", o->keys}, {"--values", o->values}, {"--kv", o->kv}, {"--queries", o->queries}},
        {{"--out", o->out}, {"--json", o->json}});
    VQ_CHECK(!o->kv.empty() || (!o->keys.empty() && !o->values.empty()), vq::InvalidArgument,
             "evict needs --keys FILE and --values FILE ([H, S, D] each), or --kv FILE "
             "([L, 2, H, S, D], e.g. from dump-kv) with --layer L");
    vq::Tensor K, V;
    if (!o->kv.empty()) {
      std::tie(K, V) = read_kv_layer(o->kv, o->layer);
    } else {
      K = read_hsd(o->keys, "keys");
      V = read_hsd(o->values, "values");
    }
    VQ_CHECK(K.shape() == V.shape(), vq::InvalidArgument, "keys ", K.shape().str(), " and values ",
             V.shape().str(), " differ in shape");
    vq::Tensor Q;
    if (!o->queries.empty()) {
      Q = read_hsd(o->queries, "queries");
      VQ_CHECK(Q.S() == K.S() && Q.D() == K.D(), vq::InvalidArgument, "queries ", Q.shape().str(),
               " do not match keys ", K.shape().str(), " in S and D");
    }
    const int64_t S = K.S();
    VQ_CHECK(o->prefill <= S, vq::InvalidArgument, "--prefill ", o->prefill,
             " exceeds the sequence length S = ", S);
    std::unique_ptr<vq::KVCache> cache =
        one_shot ? vq::eviction::make_one_shot_cache(spec, o->compress_ratio, K.D())
                 : vq::make_cache(config, K.D());
    const bool use_q = !o->queries.empty();
    Progress progress(g, "evict", S);
    auto step = [&](int64_t s0, int64_t n) {
      const vq::Tensor k = K.slice_tokens(s0, n), v = V.slice_tokens(s0, n);
      if (use_q) {
        const vq::Tensor q = Q.slice_tokens(s0, n);
        cache->update(k, v, &q);
      } else {
        cache->update(k, v);
      }
      progress.update(s0 + n);
    };
    if (one_shot) {
      step(0, S);
    } else {
      if (o->prefill > 0) step(0, o->prefill);
      for (int64_t s = o->prefill; s < S; ++s) step(s, 1);
    }
    progress.finish();

    // Kept positions per head, ascending; heads that keep fewer are padded with -1.
    const int64_t H = K.H();
    std::vector<std::vector<int64_t>> kept(static_cast<size_t>(H));
    int64_t n_max = 0, n_min = S;
    for (int64_t h = 0; h < H; ++h) {
      auto& p = kept[static_cast<size_t>(h)];
      if (S > 0) {
        const int64_t* pos = cache->positions(0, h);
        p.assign(pos, pos + cache->kept(0, h));
        std::sort(p.begin(), p.end());
      }
      n_max = std::max<int64_t>(n_max, static_cast<int64_t>(p.size()));
      n_min = std::min<int64_t>(n_min, static_cast<int64_t>(p.size()));
    }
    std::vector<int64_t> out(static_cast<size_t>(H * n_max), -1);
    for (int64_t h = 0; h < H; ++h)
      std::copy(kept[static_cast<size_t>(h)].begin(), kept[static_cast<size_t>(h)].end(),
                out.begin() + h * n_max);
    write_output(o->out, vq::encode_npy(vq::npy_from_int64(out.data(), {H, n_max})));

    const vq::CacheStats st = cache->stats();
    nlohmann::json per_head = nlohmann::json::array();
    for (const auto& p : kept) per_head.push_back(p.size());
    nlohmann::json j{{"method", one_shot ? spec.to_string() : config.to_string()},
                     {"compress_ratio", one_shot ? o->compress_ratio : 0.0},
                     {"H", H},
                     {"S", S},
                     {"D", K.D()},
                     {"prefill", o->prefill},
                     {"queries", use_q},
                     {"n_kept", n_max},
                     {"kept_per_head", per_head},
                     {"kept_bytes", st.kept_bytes},
                     {"full_seq_bytes", st.full_seq_bytes},
                     {"compression_ratio", st.compression_ratio},
                     {"output", o->out}};
    std::FILE* say = o->out == "-" ? stderr : stdout;  // stdout may carry the .npy
    if (g.verbosity > 0 && o->json != "-") {
      std::fprintf(say,
                   "%s: kept %lld of %lld tokens per head (H = %lld, D = %lld, prefill %lld%s) "
                   "-> %s [%lld, %lld]\n",
                   config.to_string().c_str(), static_cast<long long>(n_max),
                   static_cast<long long>(S), static_cast<long long>(H),
                   static_cast<long long>(K.D()), static_cast<long long>(o->prefill),
                   use_q ? ", true queries" : "", o->out.c_str(), static_cast<long long>(H),
                   static_cast<long long>(n_max));
      if (g.verbosity >= 2)
        for (int64_t h = 0; h < H; ++h) {
          const auto& p = kept[static_cast<size_t>(h)];
          std::fprintf(say, "head %lld: %zu kept, first %lld, last %lld\n",
                       static_cast<long long>(h), p.size(),
                       static_cast<long long>(p.empty() ? -1 : p.front()),
                       static_cast<long long>(p.empty() ? -1 : p.back()));
        }
      if (n_min != n_max)
        std::fprintf(say,
                     "heads keep different counts (%lld to %lld); shorter rows are padded with "
                     "-1\n",
                     static_cast<long long>(n_min), static_cast<long long>(n_max));
    }
    if (!o->json.empty()) write_json(o->json, j);
  });
}

}  // namespace vqcli

// Uses the installed C++ API: a cache from a spec string, .npy I/O and the .vqkv codec.
// Exits non-zero if a result is not what the API promises.
#include <veloxquant/cache.hpp>
#include <veloxquant/errors.hpp>
#include <veloxquant/npy.hpp>
#include <veloxquant/registry.hpp>
#include <veloxquant/vqkv.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  try {
    std::printf("%zu methods registered\n", vq::methods().size());
    // A [1, 2, 64, 32] stream with a smooth structure, fed to an H2O cache in one update.
    const int64_t H = 2, S = 64, D = 32;
    vq::Tensor k(1, H, S, D), v(1, H, S, D);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t d = 0; d < D; ++d) {
          k.at(0, h, s, d) = static_cast<float>(std::sin(0.1 * (s + 1) * (d + 1) + h));
          v.at(0, h, s, d) = static_cast<float>(std::cos(0.07 * (s + 3) * (d + 2) - h));
        }
    auto cache = vq::make_cache("h2o:budget=16", D);
    const vq::FetchResult r = cache->update_and_fetch(k, v);
    std::printf("h2o kept %lld of %lld tokens, compression ratio %.2f\n",
                static_cast<long long>(r.n_kept), static_cast<long long>(S),
                cache->stats().compression_ratio);
    if (r.n_kept != 16) return 1;

    // A longer [2, 512, 32] array through .npy bytes and the .vqkv codec (KVTC pays for a
    // fp32 PCA basis per head, so it needs a few hundred tokens to beat fp16).
    const int64_t L = 512;
    std::vector<float> big(static_cast<size_t>(H * L * D));
    for (size_t i = 0; i < big.size(); ++i) {
      const double s = static_cast<double>(i / D), d = static_cast<double>(i % D);
      big[i] = static_cast<float>(std::sin(0.05 * s + 0.3 * d) / (1.0 + 0.2 * d) +
                                  0.01 * std::cos(1.7 * s * d));
    }
    const vq::NpyArray a = vq::npy_from_float(big.data(), {H, L, D}, vq::NpyDtype::Float16);
    const std::vector<uint8_t> npy = vq::encode_npy(a);
    const vq::NpyArray back_npy = vq::parse_npy(npy.data(), npy.size());
    vq::VqkvStats st;
    const std::vector<uint8_t> file = vq::vqkv_compress(back_npy, "kvtc:bit_budget=64", &st);
    const vq::VqkvArray back = vq::vqkv_decompress(file.data(), file.size());
    const std::vector<float> x = back_npy.to_float();
    double se = 0, ss = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      se += (back.values[i] - x[i]) * double(back.values[i] - x[i]);
      ss += double(x[i]) * x[i];
    }
    std::printf("kvtc: %lld bytes (fp16 %lld, ratio %.2fx), relative RMSE %.4f\n",
                static_cast<long long>(st.file_bytes), static_cast<long long>(st.fp16_bytes),
                st.compression_ratio(), std::sqrt(se / ss));
    if (back.shape != a.shape || !(std::sqrt(se / ss) < 0.2)) return 1;

    // Errors are exceptions with readable messages.
    try {
      vq::make_cache("h2o:budget=-3", D);
      return 1;
    } catch (const vq::InvalidArgument& e) {
      std::printf("rejected as expected: %s\n", e.what());
    }
    std::printf("ok\n");
    return 0;
  } catch (const vq::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

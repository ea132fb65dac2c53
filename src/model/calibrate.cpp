// calibrate_model: run the engine over calibration text with a cache that captures every key and
// value row, then fit one .vqcal entry per stream (src/transform/calibration.cpp). It lives in the
// model layer because it drives the engine; the format and the fitting live with the methods.
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "veloxquant/cache.hpp"
#include "veloxquant/calibration.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"

namespace vq {

namespace {

/// The uncompressed cache calibrate_model runs the engine with: keeps every row (fp16-rounded in
/// the view, as `full` does) and hands each update's rows, as received, to `sink`.
class CaptureCache final : public Fp32RowsCache {
 public:
  using Sink =
      std::function<void(int64_t layer, int64_t head, int kv, const float* rows, int64_t n)>;
  CaptureCache(const CacheContext& ctx, bool pre, Sink sink)
      : Fp32RowsCache(CacheConfig::parse("full"), ctx), pre_(pre), sink_(std::move(sink)) {}
  bool wants_pre_rope_keys() const override { return pre_; }

 protected:
  void do_update(const Tensor& keys, const Tensor& values, const Tensor*) override {
    const int64_t B = batch(), H = kv_heads(), D = head_dim(), S = keys.S();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t t = 0; t < S; ++t) pos(b, h).push_back(offset() + t);
        for (int kv = 0; kv < 2; ++kv) {
          const float* src = (kv == 0 ? keys : values).head(b, h);
          auto& dst = rows(b, h, kv);
          for (int64_t x = 0; x < S * D; ++x) dst.push_back(round_to_fp16(src[x]));
          sink_(context().layer, h, kv, src, S);
        }
      }
    publish();
  }

 private:
  bool pre_;
  Sink sink_;
};

}  // namespace

Calibration calibrate_model(const Model& model, const std::vector<std::vector<int32_t>>& windows,
                            const CalibrateOptions& opt) {
  const ModelConfig& mc = model.config();
  const int64_t L = mc.n_layers, H = mc.n_kv_heads, D = mc.head_dim();
  VQ_CHECK(!windows.empty(), InvalidArgument, "calibrate: no calibration windows (no tokens)");
  VQ_CHECK(opt.chunk_tokens >= 1 && opt.chunk_tokens <= kCalibrationMaxChunk, InvalidArgument,
           "calibrate: chunk_tokens = ", opt.chunk_tokens, " is outside [1, ", kCalibrationMaxChunk,
           "]");
  int64_t n_tokens = 0;
  for (const auto& w : windows) n_tokens += static_cast<int64_t>(w.size());
  const int64_t need = min_calibration_tokens(D, opt.chunk_tokens);
  VQ_CHECK(n_tokens >= need, InvalidArgument, "calibrate: ", n_tokens,
           " calibration tokens (BOS included) are too few: a basis of head_dim ", D,
           " components with chunk_tokens ", opt.chunk_tokens, " needs at least ", need,
           " (give more text or a larger --max-tokens)");
  VQ_CHECK(D <= kCalibrationMaxHeadDim, InvalidArgument, "calibrate: head_dim ", D,
           " exceeds the .vqcal limit ", kCalibrationMaxHeadDim);
  // rows[(layer * H + head) * 2 + kv]: every captured row of that stream, [n, D].
  std::vector<std::vector<float>> rows(static_cast<size_t>(L * H * 2));
  const bool pre = opt.rope == RopeMode::Pre;
  auto sink = [&rows, H, D](int64_t layer, int64_t head, int kv, const float* r, int64_t n) {
    auto& dst = rows[static_cast<size_t>((layer * H + head) * 2 + kv)];
    dst.insert(dst.end(), r, r + n * D);
  };
  Engine engine(model, [&](int64_t layer) -> std::unique_ptr<KVCache> {
    CacheContext ctx;
    ctx.head_dim = D;
    ctx.layer = layer;
    ctx.n_layers = L;
    return std::make_unique<CaptureCache>(ctx, pre, sink);
  });
  int64_t done = 0;
  for (const auto& w : windows) {
    engine.reset();
    engine.prefill(w, false);
    if (opt.progress) opt.progress(++done, static_cast<int64_t>(windows.size()));
  }
  Calibration c;
  c.n_layers = L;
  c.n_kv_heads = H;
  c.head_dim = D;
  c.rope = opt.rope;
  c.shared_heads = opt.shared_heads;
  c.chunk_tokens = opt.chunk_tokens;
  c.tokens = static_cast<int64_t>(rows[0].size()) / D;
  for (int64_t l = 0; l < L; ++l)
    for (int64_t g = 0; g < c.groups(); ++g)
      for (int kv = 0; kv < 2; ++kv) {
        if (opt.shared_heads) {
          std::vector<float> all;
          for (int64_t h = 0; h < H; ++h) {
            const auto& r = rows[static_cast<size_t>((l * H + h) * 2 + kv)];
            all.insert(all.end(), r.begin(), r.end());
          }
          c.entries.push_back(fit_calibration_entry(
              all.data(), static_cast<int64_t>(all.size()) / D, D, opt.chunk_tokens));
        } else {
          const auto& r = rows[static_cast<size_t>((l * H + g) * 2 + kv)];
          c.entries.push_back(fit_calibration_entry(r.data(), static_cast<int64_t>(r.size()) / D, D,
                                                    opt.chunk_tokens));
        }
      }
  return c;
}

}  // namespace vq

// `kvtc`: KVTC-adapted transform coding (spec: kvtc.txt). Per (batch, head), keys and values
// independently: a PCA basis (local: fitted once on the first fit_tokens tokens and frozen;
// or shared per model from a .vqcal calibration file), a DP-optimal integer bit allocation over
// the components under bit_budget bits per token (0 bits drops a component), per-chunk affine
// quantization (or the calibration's fixed ranges) and order-0 Huffman coding. Optional fp16
// attention sinks and recent window, and pre-RoPE keys. See docs/kvtc.md.
#include "codecs/pca_codec.hpp"
#include "coding/bit_allocation.hpp"
#include "transform/method_common.hpp"
#include "veloxquant/calibration.hpp"
#include "veloxquant/errors.hpp"

namespace vq {

namespace {

bool local_basis(const CacheConfig& c) {
  return c.get_string("basis") == "local";
}

transform::PcaSettings kvtc_settings(const CacheConfig& c, int64_t head_dim) {
  transform::PcaSettings s = transform::pca_settings(c, head_dim, transform::AllocRule::Dp, true);
  const std::string& a = c.get_string("alloc");
  s.rule = a == "waterfill" ? transform::AllocRule::Waterfill : transform::AllocRule::Dp;
  s.measured_alloc = a == "dp_measured";
  s.quant_calibrated = c.get_string("quant") == "calibrated";
  return s;
}

}  // namespace

MethodInfo kvtc_method_info() {
  MethodInfo m;
  m.id = "kvtc";
  m.description =
      "PCA (local or calibrated per model) + DP-optimal per-component bit allocation (0 = drop) "
      "+ Huffman coding, K and V";
  m.options = transform::pca_common_options();
  for (auto& o : transform::allocator_options()) m.options.push_back(o);
  m.options.push_back(opt_choice(
      "alloc", "dp", {"dp", "dp_analytic", "waterfill", "dp_measured"},
      "allocator: exact DP on the analytic curve v * beta^-b (dp = dp_analytic), continuous "
      "water-filling snapped to bit_choices, or exact DP on the calibration's measured "
      "distortion table (dp_measured, needs basis=<path>)"));
  m.options.push_back(opt_string(
      "basis", "local",
      "local = PCA fitted on each stream's first fit_tokens tokens and stored in it; or the path "
      "of a .vqcal file from `veloxquant calibrate` (basis shared per model, not stored)"));
  m.options.push_back(opt_choice(
      "quant", "chunk", {"chunk", "calibrated"},
      "chunk = min/max quantizer per chunk and component (8 bytes each); calibrated = the "
      "calibration's fixed clip range per component and width, no per-chunk parameters (needs "
      "basis=<path>)"));
  m.options.push_back(opt_choice("rope", "post", {"post", "pre"},
                                 "code keys after RoPE (post) or before it (pre; the engine "
                                 "rotates what it reads back)"));
  m.options.push_back(opt_int("sink_tokens", 0, 0, kMaxBudget,
                              "first positions kept in fp16 and never encoded (attention sinks)"));
  m.options.push_back(opt_int("recent_tokens", 0, 0, kMaxBudget,
                              "newest tokens always kept in fp16: a chunk is encoded only when "
                              "this many rows stay raw after it"));
  m.validate = [](const CacheConfig& c) {
    coding::normalize_bit_choices(c.get_int_list("bit_choices"));
    const std::string& basis = c.get_string("basis");
    VQ_CHECK(!basis.empty(), InvalidArgument,
             "kvtc: basis is empty; give 'local' or the path of a .vqcal file");
    if (basis == "local") {
      VQ_CHECK(c.get_string("alloc") != "dp_measured", InvalidArgument,
               "kvtc: alloc=dp_measured needs basis=<path of a .vqcal calibration file> (the "
               "measured distortion table comes from it); basis is 'local'");
      VQ_CHECK(c.get_string("quant") != "calibrated", InvalidArgument,
               "kvtc: quant=calibrated needs basis=<path of a .vqcal calibration file> (the "
               "ranges come from it); basis is 'local'");
    }
  };
  m.family = Family::Transform;
  m.make_row_codec = codecs::make_kvtc_row_codec;
  m.make_codec = [](const CacheConfig& c, int64_t head_dim) -> std::unique_ptr<BlockCodec> {
    VQ_CHECK(head_dim >= 1 && head_dim <= 65536, InvalidArgument, c.method(),
             " codec: head_dim = ", head_dim, " is out of range; allowed [1, 65536]");
    VQ_CHECK(local_basis(c), InvalidArgument, "kvtc codec: basis=", c.get_string("basis"),
             " is supported by the kvtc cache only (a block carries no layer / head / K-V "
             "identity to pick a calibration entry); compress with basis=local");
    VQ_CHECK(c.get_int("sink_tokens") == 0 && c.get_int("recent_tokens") == 0, InvalidArgument,
             "kvtc codec: sink_tokens = ", c.get_int("sink_tokens"),
             " and recent_tokens = ", c.get_int("recent_tokens"),
             " apply to the kvtc cache only (a block codec encodes every token); leave them 0");
    const transform::PcaSettings s = kvtc_settings(c, head_dim);
    return std::make_unique<transform::TransformBlockCodec>(
        c, head_dim, false, c.get_int("chunk_tokens"),
        [s](int64_t width) { return std::make_unique<transform::PcaRowCoder>(width, s); });
  };
  return m;
}

}  // namespace vq

#include "transform/method_common.hpp"

#include <algorithm>

#include "codecs/pca_codec.hpp"
#include "coding/bit_allocation.hpp"
#include "veloxquant/errors.hpp"

namespace vq::transform {

std::vector<OptionSpec> pca_common_options() {
  return {
      opt_int("bit_budget", 0, 0, 8LL * 65536,
              "bits per token across all PCA components, for K and for V separately "
              "(0 = 4 x head_dim)"),
      opt_int("chunk_tokens", 128, 1, 1 << 20,
              "tokens per coded chunk; newer tokens wait raw (fp16, counted) until a chunk fills"),
      opt_int("fit_tokens", 0, 0, 1 << 20,
              "tokens kept raw before the basis and allocation are fitted and frozen "
              "(0 = 2 x head_dim: centering costs one rank, so head_dim rows could never "
              "give a full-rank basis)"),
      opt_choice("entropy", "huffman", {"huffman", "auto"},
                 "entropy streams: huffman = order-0 Huffman / fixed width only; auto = also try "
                 "an adaptive range coder with one model per component and keep the smaller"),
  };
}

std::vector<OptionSpec> allocator_options() {
  return {
      opt_int_list("bit_choices", "0,1,2,3,4,6,8", 0, 8,
                   "allowed bit widths per component; must include 0 (drop the component)"),
      opt_float("beta", "3.5", 1.000001, 1000.0,
                "decay of the distortion model D(v, b) = v * beta^-b the allocator minimizes"),
  };
}

PcaSettings pca_settings(const CacheConfig& c, int64_t head_dim, AllocRule rule,
                         bool from_alloc_option) {
  PcaSettings s;
  s.rule = rule;
  if (from_alloc_option)
    s.rule = c.get_string("alloc") == "waterfill" ? AllocRule::Waterfill : AllocRule::Dp;
  const int64_t b = c.get_int("bit_budget");
  s.bit_budget = b == 0 ? 4 * head_dim : b;
  s.entropy = c.get_string("entropy") == "auto" ? coding::EntropyPolicy::Auto
                                                : coding::EntropyPolicy::Huffman;
  int64_t max_bits = coding::kMaxQuantBits;
  if (s.rule == AllocRule::Dp || s.rule == AllocRule::Waterfill) {
    s.bit_choices = coding::normalize_bit_choices(c.get_int_list("bit_choices"));
    s.beta = c.get_float("beta");
    max_bits = *std::max_element(s.bit_choices.begin(), s.bit_choices.end());
  }
  // A budget no allocation can spend is a mistake (typically an example written for head_dim
  // 128 run on a small model), not a request to silently spend less.
  VQ_CHECK(s.bit_budget <= max_bits * head_dim, InvalidArgument, c.method(),
           ": bit_budget = ", s.bit_budget, " asks ",
           static_cast<double>(s.bit_budget) / static_cast<double>(head_dim),
           " bits per value on head_dim ", head_dim, ", more than the widest bit choice (",
           max_bits, ") can spend; use bit_budget <= ", max_bits * head_dim,
           " (bits per token; e.g. ", 4 * head_dim, " for 4 bits per value)");
  return s;
}

TransformSettings pca_transform_settings(const CacheConfig& c, int64_t head_dim) {
  TransformSettings t;
  t.chunk_tokens = c.get_int("chunk_tokens");
  const int64_t f = c.get_int("fit_tokens");
  t.fit_tokens = f == 0 ? 2 * head_dim : f;
  t.coupled = false;
  return t;
}

void set_pca_factories(MethodInfo& m, AllocRule rule, bool from_alloc_option) {
  m.family = Family::Transform;
  m.make_row_codec = [rule, from_alloc_option](const CacheConfig& c, const store::StreamInfo& s) {
    return codecs::make_pca_row_codec(c, s, rule, from_alloc_option);
  };
  m.make_codec = [rule, from_alloc_option](const CacheConfig& c,
                                           int64_t head_dim) -> std::unique_ptr<BlockCodec> {
    VQ_CHECK(head_dim >= 1 && head_dim <= 65536, InvalidArgument, c.method(),
             " codec: head_dim = ", head_dim, " is out of range; allowed [1, 65536]");
    const PcaSettings s = pca_settings(c, head_dim, rule, from_alloc_option);
    return std::make_unique<TransformBlockCodec>(
        c, head_dim, false, c.get_int("chunk_tokens"),
        [s](int64_t width) { return std::make_unique<PcaRowCoder>(width, s); });
  };
}

}  // namespace vq::transform

// `kivi`: KIVI's tuning-free asymmetric quantization. Per (batch, head):
//   - keys are quantized per channel: each channel over a group of `group` tokens;
//   - values are quantized per token: each token in groups of `group` channels;
// both at `bits` bits (affine min/max, fp32 min and scale per quantization group). The most recent
// tokens stay at fp16: a group of `group` tokens is quantized only once `residual + group` tokens
// are unquantized, so at least the last `residual` tokens (and fewer than residual + group) are
// always held exactly at fp16. Inputs are rounded to fp16 first (KIVI quantizes an fp16 cache).
// Codes are Huffman coded like kvtc's; every stored byte is counted (docs/methods.md).
#include <cmath>
#include <cstring>
#include <memory>

#include "codecs/kivi_codec.hpp"
#include "core/options.hpp"
#include "core/thread_pool.hpp"
#include "transform/family_coders.hpp"
#include "veloxquant/codec.hpp"
#include "veloxquant/errors.hpp"

namespace vq {

namespace {

struct KiviSettings {
  int bits = 2;
  int64_t group = 32;
  int64_t residual = 128;
  KiviSettings() = default;
  explicit KiviSettings(const CacheConfig& c)
      : bits(static_cast<int>(c.get_int("bits"))),
        group(c.get_int("group")),
        residual(c.get_int("residual")) {}
  /// Tokens quantized once n tokens have arrived.
  int64_t quantized(int64_t n) const { return n <= residual ? 0 : (n - residual) / group * group; }
};

void round_rows_fp16(const float* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = round_to_fp16(src[i]);
}

/// One section per head: the quantized groups as KIVI chunks of `group` tokens, then (when any
/// remain) one fp16 chunk holding the last S - quantized(S) tokens.
class KiviCodec final : public BlockCodec {
 public:
  KiviCodec(CacheConfig config, int64_t head_dim)
      : BlockCodec(std::move(config), head_dim),
        s_(this->config()),
        keys_(this->config().get_string("kind") == "k") {}

  bool heads_coupled() const override { return false; }

  EncodedBlock encode(const float* x, int64_t H, int64_t S) const override {
    const int64_t D = head_dim();
    VQ_CHECK(H >= 1 && S >= 0, InvalidArgument, "kivi codec: block [H = ", H, ", S = ", S,
             "] needs H >= 1 and S >= 0");
    for (int64_t i = 0; i < H * S * D; ++i)
      VQ_CHECK(std::isfinite(x[i]), InvalidArgument, "kivi codec: value ", i, " is NaN or Inf");
    EncodedBlock blk;
    blk.H = H;
    blk.S = S;
    blk.D = D;
    const int64_t q = s_.quantized(S);
    // Heads are independent sections, one piece each: the same bytes for any thread count.
    blk.sections.resize(static_cast<size_t>(H));
    parallel_for(H, grain_for(S * D), [&](int64_t h0, int64_t h1) {
      std::vector<float> rows(static_cast<size_t>(S * D));
      for (int64_t h = h0; h < h1; ++h) {
        EncodedSection& sec = blk.sections[static_cast<size_t>(h)];
        sec.head = h;
        round_rows_fp16(x + h * S * D, rows.data(), S * D);
        transform::KiviRowCoder enc(D, keys_, s_.bits, s_.group);
        for (int64_t t = 0; t < q; t += s_.group)
          enc.encode_chunk(rows.data() + t * D, s_.group, sec);
        if (S > q) transform::Fp16RowCoder(D).encode_chunk(rows.data() + q * D, S - q, sec);
      }
    });
    return blk;
  }

  void decode(const EncodedBlock& block, float* out) const override {
    check_block_layout(block);
    const int64_t D = head_dim(), S = block.S;
    const int64_t q = s_.quantized(S);
    parallel_for(block.H, grain_for(S * D), [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h) {
        const EncodedSection& sec = block.sections[static_cast<size_t>(h)];
        coding::ByteReader in(sec.bytes.data(), sec.bytes.size());
        float* rows = out + h * S * D;
        transform::KiviRowCoder dec(D, keys_, s_.bits, s_.group);
        for (int64_t t = 0; t < q; t += s_.group) {
          const int64_t n = dec.decode_chunk(in, s_.group, rows + t * D);
          VQ_CHECK(n == s_.group, FormatError, "kivi section ", h, ": a chunk holds ", n,
                   " tokens; expected ", s_.group);
        }
        if (S > q) {
          const int64_t n = transform::Fp16RowCoder(D).decode_chunk(in, S - q, rows + q * D);
          VQ_CHECK(n == S - q, FormatError, "kivi section ", h, ": the fp16 window holds ", n,
                   " tokens; expected ", S - q);
        }
        VQ_CHECK(in.at_end(), FormatError, "kivi section ", h, ": ", in.remaining(),
                 " trailing bytes");
      }
    });
  }

 private:
  KiviSettings s_;
  bool keys_;
};

}  // namespace

MethodInfo kivi_method_info() {
  MethodInfo m;
  m.id = "kivi";
  m.family = Family::Transform;
  m.make_row_codec = codecs::make_kivi_row_codec;
  m.description =
      "2-bit asymmetric quantization: keys per channel, values per token, groups of "
      "32; the last 128 tokens at fp16";
  m.options = {
      opt_int("bits", 2, 1, 8, "bits per quantized value"),
      opt_int("group", 32, 1, 1 << 16,
              "quantization group: tokens per key channel group, channels per value token group"),
      opt_int("residual", 128, 0, 1 << 20, "most recent tokens always kept at fp16"),
      transform::kind_option(),
  };
  m.make_codec = [](const CacheConfig& c, int64_t head_dim) -> std::unique_ptr<BlockCodec> {
    return std::make_unique<KiviCodec>(c, head_dim);
  };
  return m;
}

}  // namespace vq

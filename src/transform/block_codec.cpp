#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/thread_pool.hpp"
#include "transform/transform_codec.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"

namespace vq {

// ---------------------------------------------------------------------------------------------
// EncodedBlock / BlockCodec

int64_t EncodedBlock::total_bytes() const {
  int64_t s = 0;
  for (const auto& sec : sections) s += static_cast<int64_t>(sec.bytes.size());
  return s;
}

ByteBreakdown EncodedBlock::breakdown() const {
  ByteBreakdown b;
  for (const auto& sec : sections) b += sec.breakdown;
  return b;
}

int64_t EncodedBlock::pre_entropy_bytes() const {
  int64_t s = 0;
  for (const auto& sec : sections) s += sec.pre_entropy_bytes();
  return s;
}

BlockCodec::BlockCodec(CacheConfig config, int64_t head_dim)
    : config_(std::move(config)), head_dim_(head_dim) {
  VQ_CHECK(head_dim_ >= 1 && head_dim_ <= 65536, InvalidArgument, config_.method(),
           " codec: head_dim = ", head_dim_, " is out of range; allowed [1, 65536]");
}

EncodedBlock BlockCodec::encode(const Tensor& x) const {
  VQ_CHECK(x.B() == 1, InvalidArgument, method(), " codec: expects a tensor [1, H, S, D], got ",
           x.shape().str());
  VQ_CHECK(x.D() == head_dim_, InvalidArgument, method(), " codec: tensor ", x.shape().str(),
           " has D = ", x.D(), " but the codec was built for head_dim ", head_dim_);
  return encode(x.data(), x.H(), x.S());
}

Tensor BlockCodec::decode(const EncodedBlock& block) const {
  check_block_layout(block);
  Tensor out(1, block.H, block.S, head_dim_);
  decode(block, out.data());
  return out;
}

void BlockCodec::check_block_layout(const EncodedBlock& block) const {
  const std::string& id = method();
  VQ_CHECK(block.D == head_dim_, FormatError, id, " block: D = ", block.D,
           " does not match the codec's head_dim ", head_dim_);
  VQ_CHECK(block.H >= 1 && block.H <= (int64_t{1} << 20), FormatError, id, " block: H = ", block.H,
           " is outside [1, 2^20]");
  VQ_CHECK(block.S >= 0 && block.S <= (int64_t{1} << 40), FormatError, id, " block: S = ", block.S,
           " is outside [0, 2^40]");
  const double elems =
      static_cast<double>(block.H) * static_cast<double>(block.S) * static_cast<double>(block.D);
  VQ_CHECK(elems <= static_cast<double>(std::numeric_limits<int64_t>::max() / 8), FormatError, id,
           " block: H * S * D = ", elems, " values do not fit in memory");
  if (heads_coupled()) {
    VQ_CHECK(block.sections.size() == 1 && block.sections[0].head == -1, FormatError, id,
             " block: expects one section with head -1, got ", block.sections.size(),
             " section(s)");
  } else {
    VQ_CHECK(static_cast<int64_t>(block.sections.size()) == block.H, FormatError, id,
             " block: expects one section per head (", block.H, "), got ", block.sections.size());
    for (size_t h = 0; h < block.sections.size(); ++h)
      VQ_CHECK(block.sections[h].head == static_cast<int64_t>(h), FormatError, id,
               " block: section ", h, " is labelled head ", block.sections[h].head);
  }
}

std::unique_ptr<BlockCodec> make_codec(const CacheConfig& config, int64_t head_dim) {
  const MethodInfo& m = find_method(config.method());
  VQ_CHECK(static_cast<bool>(m.make_codec), InvalidArgument, "method '", m.id, "' (family ",
           family_name(m.family), ") has no block codec; use a transform method");
  return m.make_codec(config, head_dim);
}

std::unique_ptr<BlockCodec> make_codec(const std::string& spec, int64_t head_dim) {
  return make_codec(CacheConfig::parse(spec), head_dim);
}

// ---------------------------------------------------------------------------------------------
// TransformBlockCodec

namespace transform {

namespace {
// About the multiply-adds of one head's section (a PCA fit is S x D x D), for piece sizes; S is
// capped so that the product cannot overflow.
int64_t head_cost(int64_t S, int64_t D) {
  return std::min<int64_t>(S, int64_t{1} << 20) * D * D;
}
}  // namespace

TransformBlockCodec::TransformBlockCodec(CacheConfig config, int64_t head_dim, bool coupled,
                                         int64_t chunk_tokens, CoderFactory factory)
    : BlockCodec(std::move(config), head_dim),
      coupled_(coupled),
      chunk_tokens_(chunk_tokens),
      factory_(std::move(factory)) {
  VQ_CHECK(chunk_tokens_ >= 1, InvalidArgument, method(), " codec: chunk_tokens = ", chunk_tokens_,
           " must be >= 1");
}

void TransformBlockCodec::encode_rows(const float* rows, int64_t S, int64_t W,
                                      EncodedSection& sec) const {
  if (S == 0) return;
  auto coder = factory_(W);
  if (coder->needs_fit()) coder->fit(rows, S, sec);
  int64_t done = 0;
  for (int64_t n : even_chunks(S, chunk_tokens_)) {
    coder->encode_chunk(rows + done * W, n, sec);
    done += n;
  }
}

void TransformBlockCodec::decode_rows(const EncodedSection& sec, int64_t S, int64_t W,
                                      float* rows) const {
  const std::string& id = method();
  if (S == 0) {
    VQ_CHECK(sec.bytes.empty(), FormatError, id, " section: ", sec.bytes.size(),
             " bytes for a block of 0 tokens");
    return;
  }
  auto coder = factory_(W);
  coding::ByteReader in(sec.bytes.data(), sec.bytes.size());
  if (coder->needs_fit()) coder->read_header(in);
  int64_t done = 0;
  while (done < S) done += coder->decode_chunk(in, S - done, rows + done * W);
  VQ_CHECK(in.at_end(), FormatError, id, " section: ", in.remaining(),
           " trailing bytes after the last of ", S, " tokens");
}

EncodedBlock TransformBlockCodec::encode(const float* x, int64_t H, int64_t S) const {
  const int64_t D = head_dim();
  VQ_CHECK(H >= 1 && S >= 0, InvalidArgument, method(), " codec: block [H = ", H, ", S = ", S,
           ", D = ", D, "] needs H >= 1 and S >= 0");
  const size_t count = static_cast<size_t>(H * S * D);
  // Branch-free scan (exponent bits all ones = NaN or Inf); locate the culprit only on failure.
  uint32_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, 4);
    bad |= static_cast<uint32_t>((bits & 0x7F800000u) == 0x7F800000u);
  }
  if (bad)
    for (size_t i = 0; i < count; ++i)
      VQ_CHECK(std::isfinite(x[i]), InvalidArgument, method(), " codec: value ", i,
               " of the block is NaN or Inf");
  EncodedBlock block;
  block.H = H;
  block.S = S;
  block.D = D;
  if (coupled_) {
    const int64_t W = H * D;
    std::vector<float> rows(static_cast<size_t>(S * W));
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < S; ++t)
        std::memcpy(rows.data() + t * W + h * D, x + (h * S + t) * D,
                    sizeof(float) * static_cast<size_t>(D));
    EncodedSection sec;
    sec.head = -1;
    encode_rows(rows.data(), S, W, sec);
    block.sections.push_back(std::move(sec));
  } else {
    // Heads are independent sections: one piece each (the same bytes for any thread count).
    block.sections.resize(static_cast<size_t>(H));
    parallel_for(H, grain_for(head_cost(S, D)), [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h) {
        EncodedSection& sec = block.sections[static_cast<size_t>(h)];
        sec.head = h;
        encode_rows(x + h * S * D, S, D, sec);
      }
    });
  }
  return block;
}

void TransformBlockCodec::decode(const EncodedBlock& block, float* out) const {
  check_block_layout(block);
  const int64_t H = block.H, S = block.S, D = block.D;
  if (coupled_) {
    const int64_t W = H * D;
    std::vector<float> rows(static_cast<size_t>(S * W));
    decode_rows(block.sections[0], S, W, rows.data());
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < S; ++t)
        std::memcpy(out + (h * S + t) * D, rows.data() + t * W + h * D,
                    sizeof(float) * static_cast<size_t>(D));
  } else {
    // A corrupt section's error is the lowest one's whatever the thread count (parallel_for).
    parallel_for(H, grain_for(head_cost(S, D) / 4), [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h)
        decode_rows(block.sections[static_cast<size_t>(h)], S, D, out + h * S * D);
    });
  }
}

}  // namespace transform
}  // namespace vq

// The BlockCodec of every transform method: the same RowCoder a cache stream uses, applied to a
// whole [H, S, D] block at once (fit on all S tokens, encode them in even chunks of at most
// chunk_tokens). So a cache stream's stored bytes and a codec section have the same layout.
#pragma once

#include "transform/transform_cache.hpp"
#include "veloxquant/codec.hpp"

namespace vq::transform {

class TransformBlockCodec final : public BlockCodec {
 public:
  /// coupled: one section of rows [S, H * D] (head = -1); otherwise one section per head.
  TransformBlockCodec(CacheConfig config, int64_t head_dim, bool coupled, int64_t chunk_tokens,
                      CoderFactory factory);

  bool heads_coupled() const override { return coupled_; }
  EncodedBlock encode(const float* x, int64_t H, int64_t S) const override;
  void decode(const EncodedBlock& block, float* out) const override;

 private:
  /// Encode rows [S, W] into sec (nothing when S == 0).
  void encode_rows(const float* rows, int64_t S, int64_t W, EncodedSection& sec) const;
  /// Decode sec into rows [S, W]; every byte must be consumed.
  void decode_rows(const EncodedSection& sec, int64_t S, int64_t W, float* rows) const;

  bool coupled_;
  int64_t chunk_tokens_;
  CoderFactory factory_;
};

}  // namespace vq::transform

// `f32`: every token kept as fp32 rows (4 bytes per value, no rounding). As a codec part it stores
// a policy's kept rows unrounded ("full+f32": llama2.c's and llama.cpp's f32 KV cache).
#include "store/row_codec.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"

namespace vq {

MethodInfo f32_method_info() {
  MethodInfo m;
  m.id = "f32";
  m.family = Family::Transform;
  m.description = "keeps every token as fp32 rows (4 bytes per value, exact; twice fp16)";
  m.make_row_codec = [](const CacheConfig&,
                        const store::StreamInfo& s) -> std::unique_ptr<store::RowCodec> {
    VQ_CHECK(s.head_dim >= 1, InvalidArgument, "f32: head_dim = ", s.head_dim, " must be >= 1");
    return std::make_unique<store::Fp32Codec>(s.head_dim);
  };
  return m;
}

}  // namespace vq

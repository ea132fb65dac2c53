// `bf16`: every token kept as bfloat16 rows (2 bytes per value, fp32's exponent range). As a
// codec part it stores any policy's kept rows that way: "h2o:budget=256+bf16".
#include "store/row_codec.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"

namespace vq {

MethodInfo bf16_method_info() {
  MethodInfo m;
  m.id = "bf16";
  m.family = Family::Transform;
  m.description = "keeps every token as bfloat16 rows (2 bytes per value, fp32's exponent range)";
  m.make_row_codec = [](const CacheConfig&,
                        const store::StreamInfo& s) -> std::unique_ptr<store::RowCodec> {
    VQ_CHECK(s.head_dim >= 1, InvalidArgument, "bf16: head_dim = ", s.head_dim, " must be >= 1");
    return std::make_unique<store::Bf16Codec>(s.head_dim);
  };
  return m;
}

}  // namespace vq

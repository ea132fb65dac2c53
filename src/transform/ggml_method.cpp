#include "transform/ggml_method.hpp"

#include "codecs/ggml_codec.hpp"

#include "transform/ggml_coder.hpp"
#include "transform/transform_cache.hpp"
#include "transform/transform_codec.hpp"
#include "veloxquant/errors.hpp"

namespace vq::transform {

MethodInfo ggml_method_info(const char* id, coding::GgmlType type, const char* description) {
  MethodInfo m;
  m.id = id;
  m.family = Family::Transform;
  m.description = description;
  m.heads_coupled = true;
  m.options = codecs::ggml_codec_options();
  m.make_row_codec = [type](const CacheConfig& c, const store::StreamInfo& s) {
    return codecs::make_ggml_row_codec(type, c, s);
  };
  m.make_codec = [type](const CacheConfig& c, int64_t head_dim) -> std::unique_ptr<BlockCodec> {
    return std::make_unique<TransformBlockCodec>(c, head_dim, true, 1 << 20, [type](int64_t width) {
      return std::make_unique<GgmlRowCoder>(type, width);
    });
  };
  return m;
}

}  // namespace vq::transform

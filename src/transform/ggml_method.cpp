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
  m.options = codecs::ggml_codec_options();
  m.make_row_codec = [type](const CacheConfig& c, const store::StreamInfo& s) {
    return codecs::make_ggml_row_codec(type, c, s);
  };
  m.make_codec = [type](const CacheConfig& c, int64_t head_dim) -> std::unique_ptr<BlockCodec> {
    const int64_t block = std::stoll(c.get_string("block"));
    codecs::check_ggml_geometry(type, head_dim, block);  // the cache's own rule and message
    return std::make_unique<TransformBlockCodec>(
        c, head_dim, false, 1 << 20, [type, block](int64_t width) {
          return std::make_unique<GgmlRowCoder>(type, width, block);
        });
  };
  return m;
}

std::unique_ptr<BlockCodec> make_ggml_v1_codec(const CacheConfig& c, int64_t head_dim) {
  const std::string& id = c.method();
  if (id != "q8_0" && id != "q4_0") return nullptr;
  const coding::GgmlType type = id == "q8_0" ? coding::GgmlType::Q8_0 : coding::GgmlType::Q4_0;
  return std::make_unique<TransformBlockCodec>(c, head_dim, true, 1 << 20, [type](int64_t width) {
    return std::make_unique<GgmlRowCoder>(type, width, 0);
  });
}

}  // namespace vq::transform

// .vqkv writer and reader. The container is specified in docs/format.md; the section payloads are
// the transform codecs' own bytes (docs/kvtc.md). Everything is little-endian.
#include "io/vqkv.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include <sys/stat.h>
#include <unistd.h>

#include "coding/ggml_blocks.hpp"
#include "core/file_io.hpp"
#include "transform/ggml_method.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"

namespace vq {

const char* vqkv_layout_name(VqkvLayout l) {
  switch (l) {
    case VqkvLayout::SD:
      return "[S, D]";
    case VqkvLayout::HSD:
      return "[H, S, D]";
    case VqkvLayout::LHSD:
      return "[L, H, S, D]";
    case VqkvLayout::L2HSD:
      return "[L, 2, H, S, D]";
  }
  return "?";
}

const char* vqkv_kind_name(VqkvKind k) {
  switch (k) {
    case VqkvKind::Tensor:
      return "tensor";
    case VqkvKind::Keys:
      return "K";
    case VqkvKind::Values:
      return "V";
  }
  return "?";
}

int64_t VqkvHeader::n_kinds() const {
  return layout == VqkvLayout::L2HSD ? 2 : 1;
}

std::vector<int64_t> VqkvHeader::shape() const {
  switch (layout) {
    case VqkvLayout::SD:
      return {S, D};
    case VqkvLayout::HSD:
      return {H, S, D};
    case VqkvLayout::LHSD:
      return {L, H, S, D};
    case VqkvLayout::L2HSD:
      return {L, 2, H, S, D};
  }
  return {};
}

int64_t VqkvHeader::numel() const {
  return L * n_kinds() * H * S * D;
}

double VqkvStats::compression_ratio() const {
  return file_bytes > 0 ? static_cast<double>(fp16_bytes) / static_cast<double>(file_bytes) : 1.0;
}

NpyArray VqkvArray::to_npy() const {
  return npy_from_float(values.data(), shape, header.source_dtype);
}

namespace vqkv {

namespace {

void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t get_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
std::string hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// The array layout a shape describes, with L, H, S, D filled in.
VqkvHeader header_for_shape(const std::vector<int64_t>& shape) {
  VqkvHeader h;
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  s += "]";
  for (int64_t d : shape)
    VQ_CHECK(d >= 0, InvalidArgument, "vqkv: shape ", s, " has a negative dimension");
  switch (shape.size()) {
    case 2:
      h.layout = VqkvLayout::SD;
      h.S = shape[0];
      h.D = shape[1];
      break;
    case 3:
      h.layout = VqkvLayout::HSD;
      h.H = shape[0];
      h.S = shape[1];
      h.D = shape[2];
      break;
    case 4:
      h.layout = VqkvLayout::LHSD;
      h.L = shape[0];
      h.H = shape[1];
      h.S = shape[2];
      h.D = shape[3];
      break;
    case 5:
      VQ_CHECK(shape[1] == 2, InvalidArgument,
               "vqkv: a 5-d array must be [L, 2, H, S, D] (keys and "
               "values); got shape ",
               s, " with dimension 1 = ", shape[1]);
      h.layout = VqkvLayout::L2HSD;
      h.L = shape[0];
      h.H = shape[2];
      h.S = shape[3];
      h.D = shape[4];
      break;
    default:
      VQ_THROW(InvalidArgument, "vqkv: array of shape ", s, " (rank ", shape.size(),
               ") is not [S, D], [H, S, D], [L, H, S, D] or [L, 2, H, S, D]");
  }
  VQ_CHECK(h.L >= 1 && h.L <= kMaxLayers, InvalidArgument, "vqkv: L = ", h.L, " outside [1, ",
           kMaxLayers, "] in shape ", s);
  VQ_CHECK(h.H >= 1 && h.H <= kMaxHeads, InvalidArgument, "vqkv: H = ", h.H, " outside [1, ",
           kMaxHeads, "] in shape ", s);
  VQ_CHECK(h.D >= 1 && h.D <= kMaxHeadDim, InvalidArgument, "vqkv: D = ", h.D, " outside [1, ",
           kMaxHeadDim, "] in shape ", s);
  VQ_CHECK(h.S <= kMaxTokens, InvalidArgument, "vqkv: S = ", h.S, " exceeds ", kMaxTokens);
  const double values = static_cast<double>(h.L * h.n_kinds() * h.H) * static_cast<double>(h.S) *
                        static_cast<double>(h.D);
  VQ_CHECK(values < 0x1p62, InvalidArgument, "vqkv: shape ", s, " has more than 2^62 values");
  return h;
}

// Range check for a value read from an untrusted header (all four are non-negative here).
int64_t checked_dim(uint64_t v, int64_t lo, int64_t hi, const char* name) {
  VQ_CHECK(v >= static_cast<uint64_t>(lo) && v <= static_cast<uint64_t>(hi), FormatError,
           "vqkv: header field ", name, " = ", v, " is outside [", lo, ", ", hi, "]");
  return static_cast<int64_t>(v);
}

std::unique_ptr<BlockCodec> codec_for(const VqkvHeader& h) {
  try {
    const CacheConfig config = CacheConfig::parse(h.spec);
    if (h.version == 1)  // q8_0 / q4_0 blocks spanned the heads then
      if (auto old = transform::make_ggml_v1_codec(config, h.D)) return old;
    const MethodInfo& m = find_method(config.method());
    VQ_CHECK(static_cast<bool>(m.make_codec), FormatError, "vqkv: method '", m.id,
             "' in the file has no block codec (family ", family_name(m.family), ")");
    return m.make_codec(config, h.D);
  } catch (const InvalidArgument& e) {
    VQ_THROW(FormatError, "vqkv: the file's method spec '", h.spec,
             "' is not usable by this build: ", e.what());
  }
}

// The fewest bytes a section of S tokens of width W can take in a file this library writes:
// exact for the fixed-rate formats (q8_0, q4_0, fp16), one byte per chunk (its token count) for
// the chunked ones. Checked against each section's size before anything is decoded, so a header
// that claims a huge S over a few bytes is refused at once instead of after the allocation.
uint64_t min_section_bytes(const CacheConfig& c, int64_t S, int64_t W, bool coupled) {
  if (S <= 0) return 0;
  const uint64_t s = static_cast<uint64_t>(S), w = static_cast<uint64_t>(W);
  const std::string& m = c.method();
  if (m == "q8_0" || m == "q4_0") {
    const auto t = m == "q8_0" ? coding::GgmlType::Q8_0 : coding::GgmlType::Q4_0;
    if (coupled) return s * static_cast<uint64_t>(coding::ggml_row_bytes(t, W));  // version 1
    const int64_t block = std::stoll(c.get_string("block"));
    return s * static_cast<uint64_t>(W / block * coding::ggml_block_bytes(t, block));
  }
  if (m == "svdq" && c.get_string("kind") == "v") return 2 * s * w;  // fp16 rows
  if (m == "kivi") {
    // fp16 window: the tokens not in a full group beyond `residual`, 2 bytes per value.
    const int64_t group = c.get_int("group"), residual = c.get_int("residual");
    const int64_t q = S <= residual ? 0 : (S - residual) / group * group;
    return 2 * static_cast<uint64_t>(S - q) * w + static_cast<uint64_t>(q / group);
  }
  for (const auto& o : find_method(m).options)
    if (o.name == "chunk_tokens") {
      const uint64_t chunk = static_cast<uint64_t>(c.get_int("chunk_tokens"));
      return (s + chunk - 1) / chunk;
    }
  return 0;
}

}  // namespace

CodecRange codec_value_range(const CacheConfig& config) {
  const std::string& m = config.method();
  // fp16 holds |x| <= 65504. kivi rounds its input to fp16 and keeps its residual window in
  // fp16; gear stores outliers and the low-rank residual in fp16; svdq stores values (kind=v) in
  // fp16. The llama.cpp blocks store one fp16 scale per 32 values: amax / 127 (q8_0) and
  // amax / 8 (q4_0) must stay finite in fp16.
  if (m == "kivi" || m == "gear") return {65504.0, "fp16 storage"};
  if (m == "svdq" && config.get_string("kind") == "v") return {65504.0, "fp16 values"};
  if (m == "q8_0") return {65504.0 * 127.0, "an fp16 block scale of max|x| / 127"};
  if (m == "q4_0") return {65504.0 * 8.0, "an fp16 block scale of max|x| / 8"};
  // The PCA family keeps latents, means and quantizer ranges in fp32; squares and products of
  // values near FLT_MAX overflow there, so the range stops well below it.
  return {1e30, "fp32 latents and quantizer ranges"};
}

// (declared in io/vqkv.hpp) The position of flat index i in a C-order array of `shape`, as "[a, b,
// c]".
std::string index_str(int64_t i, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] > 0 ? i % shape[d] : 0;
    i = shape[d] > 0 ? i / shape[d] : 0;
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

}  // namespace vqkv

std::vector<uint8_t> vqkv_compress(const float* data, const std::vector<int64_t>& shape,
                                   const CacheConfig& config, NpyDtype source_dtype,
                                   VqkvStats* stats, const VqkvProgress& progress) {
  using namespace vqkv;
  VqkvHeader h = header_for_shape(shape);
  if (source_dtype == NpyDtype::Float64) source_dtype = NpyDtype::Float32;
  VQ_CHECK(source_dtype == NpyDtype::Float32 || source_dtype == NpyDtype::Float16 ||
               source_dtype == NpyDtype::BFloat16,
           InvalidArgument, "vqkv: source dtype ", npy_dtype_name(source_dtype),
           " is not float32, float16 or bfloat16");
  h.source_dtype = source_dtype;
  const std::unique_ptr<BlockCodec> codec = make_codec(config, h.D);
  h.spec = codec->config().to_string(true);
  VQ_CHECK(h.spec.size() <= kMaxSpecBytes, InvalidArgument, "vqkv: method spec of ", h.spec.size(),
           " bytes exceeds ", kMaxSpecBytes);
  VQ_CHECK(data != nullptr || h.numel() == 0, InvalidArgument, "vqkv_compress: null data");
  // Refuse, before encoding, any value the codec cannot store: a file that its own decoder would
  // refuse is never written. Named by its position in the caller's array.
  {
    const CodecRange r = codec_value_range(codec->config());
    const float lim = static_cast<float>(r.max_abs);
    const size_t n = static_cast<size_t>(h.numel());
    uint32_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad |= static_cast<uint32_t>(!(std::fabs(data[i]) <= lim));
    if (bad)
      for (size_t i = 0; i < n; ++i) {
        const float v = data[i];
        VQ_CHECK(std::isfinite(v), InvalidArgument, "vqkv: value ", v, " at ",
                 index_str(static_cast<int64_t>(i), shape), " is NaN or Inf");
        VQ_CHECK(std::fabs(v) <= lim, InvalidArgument, "vqkv: value ", v, " at ",
                 index_str(static_cast<int64_t>(i), shape), " is outside the range of ",
                 config.method(), " [-", r.max_abs, ", ", r.max_abs, "] (", r.why,
                 "); scale the data down or use another method");
      }
  }

  // Encode every (layer, kind) block [H, S, D].
  const int64_t K = h.n_kinds();
  const int64_t block_values = h.H * h.S * h.D;
  std::vector<EncodedBlock> blocks;
  blocks.reserve(static_cast<size_t>(h.L * K));
  VqkvStats st;
  for (int64_t l = 0; l < h.L; ++l) {
    for (int64_t k = 0; k < K; ++k) {
      const float* x = data + (l * K + k) * block_values;
      blocks.push_back(codec->encode(x, h.H, h.S));
      st.breakdown += blocks.back().breakdown();
      st.pre_entropy_bytes += blocks.back().pre_entropy_bytes();
      if (progress) progress(l * K + k + 1, h.L * K);
    }
  }
  uint64_t n_sections = 0, payload = 0;
  for (const auto& b : blocks) {
    n_sections += b.sections.size();
    for (const auto& s : b.sections) payload += s.bytes.size();
  }
  const uint64_t table_end = checksum_offset(h.spec.size(), n_sections);
  const uint64_t total = table_end + kChecksumBytes + payload;
  std::vector<uint8_t> out(static_cast<size_t>(total), 0);
  uint8_t* p = out.data();
  std::memcpy(p, kMagic, 8);
  put_u16(p + kOffVersion, kVqkvVersion);
  put_u16(p + kOffFlags, 0);
  put_u32(p + kOffSpecLen, static_cast<uint32_t>(h.spec.size()));
  p[kOffLayout] = static_cast<uint8_t>(h.layout);
  p[kOffDtype] = static_cast<uint8_t>(h.source_dtype);
  put_u16(p + kOffReserved, 0);
  put_u32(p + kOffL, static_cast<uint32_t>(h.L));
  put_u32(p + kOffH, static_cast<uint32_t>(h.H));
  put_u32(p + kOffD, static_cast<uint32_t>(h.D));
  put_u64(p + kOffS, static_cast<uint64_t>(h.S));
  put_u64(p + kOffNSections, n_sections);
  if (!h.spec.empty()) std::memcpy(p + kFixedHeaderBytes, h.spec.data(), h.spec.size());
  uint8_t* entry = p + kFixedHeaderBytes + h.spec.size();
  uint8_t* sec_out = p + table_end + kChecksumBytes;
  for (int64_t l = 0; l < h.L; ++l) {
    for (int64_t k = 0; k < K; ++k) {
      const VqkvKind kind = h.layout != VqkvLayout::L2HSD ? VqkvKind::Tensor
                            : k == 0                      ? VqkvKind::Keys
                                                          : VqkvKind::Values;
      for (const auto& s : blocks[static_cast<size_t>(l * K + k)].sections) {
        put_u32(entry + 0, static_cast<uint32_t>(l));
        entry[4] = static_cast<uint8_t>(kind);
        put_u32(entry + 8, s.head < 0 ? kAllHeads : static_cast<uint32_t>(s.head));
        put_u64(entry + 16, s.bytes.size());
        put_u64(entry + 24, xxh64(s.bytes.data(), s.bytes.size()));
        entry += kEntryBytes;
        if (!s.bytes.empty()) std::memcpy(sec_out, s.bytes.data(), s.bytes.size());
        sec_out += s.bytes.size();
      }
    }
  }
  put_u64(p + table_end, xxh64(p, static_cast<size_t>(table_end)));

  if (stats != nullptr) {
    st.file_bytes = static_cast<int64_t>(total);
    st.section_bytes = static_cast<int64_t>(payload);
    st.source_bytes = h.numel() * static_cast<int64_t>(npy_dtype_size(h.source_dtype));
    st.fp16_bytes = h.numel() * 2;
    *stats = st;
  }
  return out;
}

std::vector<uint8_t> vqkv_compress(const NpyArray& array, const std::string& spec,
                                   VqkvStats* stats) {
  const std::vector<float> x = array.to_float();
  return vqkv_compress(x.data(), array.shape, CacheConfig::parse(spec), array.dtype, stats);
}

VqkvIndex vqkv_parse(const uint8_t* data, size_t size, const VqkvReadOptions& opts) {
  using namespace vqkv;
  VQ_CHECK(data != nullptr || size == 0, InvalidArgument, "vqkv_parse: null buffer");
  VQ_CHECK(size >= kFixedHeaderBytes + kChecksumBytes, FormatError, "vqkv: file of ", size,
           " bytes is shorter than the ", kFixedHeaderBytes + kChecksumBytes,
           "-byte minimum header (truncated)");
  const uint8_t* p = data;
  VQ_CHECK(std::memcmp(p, kMagic, 8) == 0, FormatError, "vqkv: bad magic (not a .vqkv file)");
  const uint16_t version = get_u16(p + kOffVersion);
  VQ_CHECK(version >= kVqkvOldestVersion && version <= kVqkvVersion, FormatError,
           "vqkv: format version ", version, " is not supported (this build reads versions ",
           kVqkvOldestVersion, " to ", kVqkvVersion, ")");
  // Locate the header checksum: every size is checked against the file before it is used.
  const uint32_t spec_len = get_u32(p + kOffSpecLen);
  VQ_CHECK(spec_len <= kMaxSpecBytes, FormatError, "vqkv: spec length ", spec_len,
           " exceeds the limit ", kMaxSpecBytes);
  const uint64_t n_sections = get_u64(p + kOffNSections);
  const uint64_t after_spec = kFixedHeaderBytes + uint64_t{spec_len};
  VQ_CHECK(after_spec + kChecksumBytes <= size, FormatError, "vqkv: spec of ", spec_len,
           " bytes runs past the end of the ", size, "-byte file (truncated)");
  VQ_CHECK(n_sections <= (size - after_spec - kChecksumBytes) / kEntryBytes, FormatError,
           "vqkv: section table of ", n_sections, " entries does not fit in the ", size,
           "-byte file (truncated or corrupt)");
  const uint64_t table_end = checksum_offset(spec_len, n_sections);
  const uint64_t stored_sum = get_u64(p + table_end);
  const uint64_t header_sum = xxh64(p, static_cast<size_t>(table_end));
  VQ_CHECK(stored_sum == header_sum, FormatError, "vqkv: header checksum mismatch (stored ",
           stored_sum, ", computed ", header_sum, "): the header or section table is corrupt");

  // The header is intact as written; now check that what it says is valid.
  VQ_CHECK(get_u16(p + kOffFlags) == 0 && get_u16(p + kOffReserved) == 0, FormatError,
           "vqkv: reserved header fields are not zero (a newer writer?)");
  VqkvIndex idx;
  idx.file_bytes = size;
  idx.header_bytes = table_end + kChecksumBytes;
  VqkvHeader& h = idx.header;
  h.version = version;
  const uint8_t layout = p[kOffLayout];
  VQ_CHECK(layout >= 1 && layout <= 4, FormatError, "vqkv: unknown layout code ", int{layout},
           " (known: 1 = [S, D], 2 = [H, S, D], 3 = [L, H, S, D], 4 = [L, 2, H, S, D])");
  h.layout = static_cast<VqkvLayout>(layout);
  const uint8_t dtype = p[kOffDtype];
  VQ_CHECK(dtype >= 1 && dtype <= 3, FormatError, "vqkv: unknown source dtype code ", int{dtype},
           " (known: 1 = float32, 2 = float16, 3 = bfloat16)");
  h.source_dtype = static_cast<NpyDtype>(dtype);
  h.L = checked_dim(get_u32(p + kOffL), 1, kMaxLayers, "L");
  h.H = checked_dim(get_u32(p + kOffH), 1, kMaxHeads, "H");
  h.D = checked_dim(get_u32(p + kOffD), 1, kMaxHeadDim, "D");
  h.S = checked_dim(get_u64(p + kOffS), 0, kMaxTokens, "S");
  VQ_CHECK(h.layout == VqkvLayout::LHSD || h.layout == VqkvLayout::L2HSD || h.L == 1, FormatError,
           "vqkv: layout ", vqkv_layout_name(h.layout), " with L = ", h.L, " (must be 1)");
  VQ_CHECK(h.layout != VqkvLayout::SD || h.H == 1, FormatError,
           "vqkv: layout [S, D] with H = ", h.H, " (must be 1)");
  // L * K * H * S * D with every factor bounded: L*K*H <= 2^41, S*D <= 2^56; compare in double
  // first so the exact product is only formed when it is small.
  const double values = static_cast<double>(h.L * h.n_kinds() * h.H) * static_cast<double>(h.S) *
                        static_cast<double>(h.D);
  VQ_CHECK(values <= static_cast<double>(opts.max_values) && values < 0x1p62, FormatError,
           "vqkv: shape ", NpyArray{NpyDtype::Float32, h.shape(), {}}.shape_str(), " decodes to ",
           values, " values, above the reader's limit of ", opts.max_values);
  h.spec.assign(reinterpret_cast<const char*>(p + kFixedHeaderBytes), spec_len);
  const std::unique_ptr<BlockCodec> codec = codec_for(h);

  // The section table must list exactly the sections the codec writes, in canonical order.
  const uint64_t per_block = codec->heads_coupled() ? 1 : static_cast<uint64_t>(h.H);
  const uint64_t expect = static_cast<uint64_t>(h.L * h.n_kinds()) * per_block;
  VQ_CHECK(n_sections == expect, FormatError, "vqkv: ", n_sections, " sections in the table but ",
           expect, " expected for L = ", h.L, ", ", h.n_kinds(), " kind(s), ", per_block,
           " per block");
  idx.sections.reserve(static_cast<size_t>(n_sections));
  const int64_t width = codec->heads_coupled() ? h.H * h.D : h.D;
  const uint64_t min_bytes = min_section_bytes(codec->config(), h.S, width, codec->heads_coupled());
  uint64_t offset = table_end + kChecksumBytes;
  const uint8_t* entry = p + kFixedHeaderBytes + spec_len;
  for (int64_t l = 0; l < h.L; ++l) {
    for (int64_t k = 0; k < h.n_kinds(); ++k) {
      const VqkvKind kind = h.layout != VqkvLayout::L2HSD ? VqkvKind::Tensor
                            : k == 0                      ? VqkvKind::Keys
                                                          : VqkvKind::Values;
      for (uint64_t j = 0; j < per_block; ++j, entry += kEntryBytes) {
        const size_t i = idx.sections.size();
        VqkvSection s;
        s.layer = l;
        s.kind = kind;
        s.head = codec->heads_coupled() ? -1 : static_cast<int64_t>(j);
        const uint32_t layer = get_u32(entry);
        const uint32_t head = get_u32(entry + 8);
        const uint32_t want_head = s.head < 0 ? kAllHeads : static_cast<uint32_t>(s.head);
        VQ_CHECK(layer == static_cast<uint64_t>(l) && entry[4] == static_cast<uint8_t>(kind) &&
                     head == want_head,
                 FormatError, "vqkv: section ", i, " is labelled (layer ", layer, ", kind ",
                 int{entry[4]}, ", head ", head, ") but the canonical order expects (layer ", l,
                 ", kind ", static_cast<int>(kind), ", head ", want_head, ")");
        VQ_CHECK(entry[5] == 0 && entry[6] == 0 && entry[7] == 0 && get_u32(entry + 12) == 0,
                 FormatError, "vqkv: section ", i, " has non-zero reserved bytes");
        s.size = get_u64(entry + 16);
        s.checksum = get_u64(entry + 24);
        VQ_CHECK(s.size <= size - offset, FormatError, "vqkv: section ", i, " (layer ", l, ", ",
                 vqkv_kind_name(kind), ", head ", s.head, ") of ", s.size, " bytes at offset ",
                 offset, " runs past the end of the ", size, "-byte file (truncated)");
        VQ_CHECK(s.size >= min_bytes, FormatError, "vqkv: section ", i, " (layer ", l, ", ",
                 vqkv_kind_name(kind), ", head ", s.head, ") holds ", s.size,
                 " bytes, but S = ", h.S, " tokens of width ", width, " need at least ", min_bytes,
                 " with ", codec->method(), " (truncated, or a header that lies)");
        s.offset = offset;
        offset += s.size;
        idx.sections.push_back(s);
      }
    }
  }
  VQ_CHECK(offset == size, FormatError, "vqkv: ", size - offset,
           " unexpected bytes after the last section (file of ", size, " bytes)");
  if (opts.verify_sections) {
    for (size_t i = 0; i < idx.sections.size(); ++i) {
      const VqkvSection& s = idx.sections[i];
      const uint64_t sum = xxh64(p + s.offset, static_cast<size_t>(s.size));
      VQ_CHECK(sum == s.checksum, FormatError, "vqkv: section ", i, " (layer ", s.layer, ", ",
               vqkv_kind_name(s.kind), ", head ", s.head, ") checksum mismatch: stored ",
               hex64(s.checksum), ", computed ", hex64(sum));
    }
  }
  return idx;
}

VqkvArray vqkv_decompress(const uint8_t* data, size_t size, const VqkvReadOptions& opts) {
  VqkvIndex idx = vqkv_parse(data, size, opts);
  const VqkvHeader& h = idx.header;
  const std::unique_ptr<BlockCodec> codec = vqkv::codec_for(h);
  // Bound what the declared shape may cost relative to the bytes present, before allocating.
  const double values = static_cast<double>(h.numel());
  VQ_CHECK(values <= static_cast<double>(opts.free_values) ||
               values <= static_cast<double>(size) * static_cast<double>(opts.max_values_per_byte),
           FormatError, "vqkv: shape ", NpyArray{NpyDtype::Float32, h.shape(), {}}.shape_str(),
           " declares ", h.numel(), " values in a file of ", size, " bytes: more than ",
           opts.max_values_per_byte,
           " values per byte (decompression-bomb limit; raise "
           "VqkvReadOptions::max_values_per_byte for such files)");
  VqkvArray out;
  out.header = h;
  out.shape = h.shape();
  out.values.resize(static_cast<size_t>(h.numel()));
  const int64_t block_values = h.H * h.S * h.D;
  size_t next = 0;
  for (int64_t b = 0; b < h.L * h.n_kinds(); ++b) {
    EncodedBlock block;
    block.H = h.H;
    block.S = h.S;
    block.D = h.D;
    const size_t per_block = codec->heads_coupled() ? 1 : static_cast<size_t>(h.H);
    for (size_t j = 0; j < per_block; ++j, ++next) {
      const VqkvSection& s = idx.sections[next];
      EncodedSection sec;
      sec.head = s.head;
      sec.bytes.assign(data + s.offset, data + s.offset + s.size);
      block.sections.push_back(std::move(sec));
    }
    try {
      codec->decode(block, out.values.data() + b * block_values);
    } catch (const Error& e) {  // the codec's FormatError (or InvalidArgument), with context
      const VqkvKind kind = idx.sections[next - 1].kind;
      VQ_THROW(FormatError, "vqkv: layer ", b / h.n_kinds(),
               kind == VqkvKind::Tensor ? "" : (kind == VqkvKind::Keys ? " K" : " V"), ": ",
               e.what());
    }
  }
  return out;
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  return read_whole_file(path);
}

void write_file_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  write_file_atomic(path, bytes);
}

}  // namespace vq

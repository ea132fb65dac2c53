// GGUF reader: a bounds-checked cursor over the mapped bytes; nothing is read before its size is
// known to fit in what is left of the file.
#include "veloxquant/gguf.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "veloxquant/errors.hpp"

namespace vq {
namespace {

constexpr uint64_t kMaxDims = 4;   // ggml tensors have at most 4 axes
constexpr int kMaxArrayDepth = 8;  // nested arrays deeper than this are refused
constexpr uint64_t kMaxKeyBytes =
    65535;  // a metadata key or tensor name longer than this is refused

// Reads little-endian values from [pos, end) and throws FormatError naming `what` when the bytes
// run out.
class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size) : base_(base), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  void need(uint64_t n, const std::string& what) const {
    VQ_CHECK(n <= left(), FormatError, what, " needs ", n, " bytes at offset ", pos_, " but only ",
             left(), " remain (file is ", size_, " bytes)");
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  const uint8_t* here() const { return base_ + pos_; }
  void skip(uint64_t n) { pos_ += n; }  // callers checked n <= left()
  std::string string(const std::string& what,
                     uint64_t max_len = std::numeric_limits<uint64_t>::max()) {
    const uint64_t n = read<uint64_t>(what + " (length)");
    VQ_CHECK(n <= max_len, FormatError, what, " has length ", n, ", above the limit ", max_len);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// Smallest number of bytes one element of `t` can take (for checking array counts up front).
uint64_t min_value_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL:
      return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
      return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32:
      return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64:
      return 8;
    case GgufValueType::STRING:
      return 8;
    case GgufValueType::ARRAY:
      return 12;
  }
  return 1;
}

bool valid_value_type(uint32_t t) {
  return t <= 12;
}

GgufValue read_value(Cursor& c, GgufValueType type, const std::string& key, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufValueType::UINT8:
      v.u = c.read<uint8_t>(key);
      break;
    case GgufValueType::INT8:
      v.i = c.read<int8_t>(key);
      break;
    case GgufValueType::UINT16:
      v.u = c.read<uint16_t>(key);
      break;
    case GgufValueType::INT16:
      v.i = c.read<int16_t>(key);
      break;
    case GgufValueType::UINT32:
      v.u = c.read<uint32_t>(key);
      break;
    case GgufValueType::INT32:
      v.i = c.read<int32_t>(key);
      break;
    case GgufValueType::UINT64:
      v.u = c.read<uint64_t>(key);
      break;
    case GgufValueType::INT64:
      v.i = c.read<int64_t>(key);
      break;
    case GgufValueType::FLOAT32:
      v.f = c.read<float>(key);
      break;
    case GgufValueType::FLOAT64:
      v.f = c.read<double>(key);
      break;
    case GgufValueType::BOOL: {
      const uint8_t b = c.read<uint8_t>(key);
      VQ_CHECK(b <= 1, FormatError, "metadata ", key, ": bool byte is ", int(b),
               " (must be 0 or 1)");
      v.u = b;
      break;
    }
    case GgufValueType::STRING:
      v.str = c.string("metadata " + key);
      break;
    case GgufValueType::ARRAY: {
      VQ_CHECK(depth < kMaxArrayDepth, FormatError, "metadata ", key,
               ": arrays nested deeper than ", kMaxArrayDepth, " levels");
      const uint32_t et = c.read<uint32_t>("metadata " + key + " (array element type)");
      VQ_CHECK(valid_value_type(et), FormatError, "metadata ", key, ": array element type ", et,
               " is not a GGUF value type (0..12)");
      v.elem_type = static_cast<GgufValueType>(et);
      const uint64_t n = c.read<uint64_t>("metadata " + key + " (array length)");
      const uint64_t min_bytes = min_value_bytes(v.elem_type);
      VQ_CHECK(n <= c.left() / min_bytes, FormatError, "metadata ", key, ": array of ", n, " ",
               gguf_value_type_name(et), " needs at least ", min_bytes, " bytes each but only ",
               c.left(), " bytes remain");
      v.count = n;
      if (v.elem_type == GgufValueType::STRING || v.elem_type == GgufValueType::ARRAY) {
        v.arr.reserve(static_cast<size_t>(n));
        for (uint64_t k = 0; k < n; ++k)
          v.arr.push_back(read_value(c, v.elem_type, key, depth + 1));
      } else {
        // Fixed-size elements: n * size <= bytes left was checked above. Bools are validated here.
        const uint64_t bytes = n * min_bytes;
        v.raw = c.here();
        if (v.elem_type == GgufValueType::BOOL)
          for (uint64_t k = 0; k < n; ++k)
            VQ_CHECK(v.raw[k] <= 1, FormatError, "metadata ", key, "[", k, "]: bool byte is ",
                     int(v.raw[k]), " (must be 0 or 1)");
        c.skip(bytes);
      }
      break;
    }
  }
  return v;
}

}  // namespace

std::string gguf_value_type_name(uint32_t t) {
  static const char* kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                 "int32",  "float32", "bool",   "string", "array",
                                 "uint64", "int64",   "float64"};
  return t <= 12 ? kNames[t] : "type#" + std::to_string(t);
}

// ------------------------------------------------------------------------------------------------
// GgufValue

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
      return true;
    default:
      return false;
  }
}

static bool is_unsigned(GgufValueType t) {
  return t == GgufValueType::UINT8 || t == GgufValueType::UINT16 || t == GgufValueType::UINT32 ||
         t == GgufValueType::UINT64;
}

int64_t GgufValue::as_int(const std::string& key) const {
  VQ_CHECK(is_integer(), FormatError, "metadata ", key, " is ",
           gguf_value_type_name(uint32_t(type)), ", expected an integer");
  if (is_unsigned(type)) {
    VQ_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), FormatError,
             "metadata ", key, " = ", u, " is above ", std::numeric_limits<int64_t>::max());
    return static_cast<int64_t>(u);
  }
  return i;
}

double GgufValue::as_float(const std::string& key) const {
  if (is_float()) return f;
  if (is_integer()) return is_unsigned(type) ? static_cast<double>(u) : static_cast<double>(i);
  VQ_THROW(FormatError, "metadata ", key, " is ", gguf_value_type_name(uint32_t(type)),
           ", expected a number");
}

bool GgufValue::as_bool(const std::string& key) const {
  VQ_CHECK(type == GgufValueType::BOOL, FormatError, "metadata ", key, " is ",
           gguf_value_type_name(uint32_t(type)), ", expected bool");
  return u != 0;
}

const std::string& GgufValue::as_string(const std::string& key) const {
  VQ_CHECK(type == GgufValueType::STRING, FormatError, "metadata ", key, " is ",
           gguf_value_type_name(uint32_t(type)), ", expected string");
  return str;
}

GgufValue GgufValue::element(uint64_t k) const {
  VQ_CHECK(type == GgufValueType::ARRAY && k < count, InvalidArgument, "array element ", k,
           " outside [0, ", count, ")");
  if (raw == nullptr) return arr[static_cast<size_t>(k)];
  GgufValue e;
  e.type = elem_type;
  const uint8_t* p = raw + k * min_value_bytes(elem_type);
  auto ld = [p](auto x) {
    std::memcpy(&x, p, sizeof x);
    return x;
  };
  switch (elem_type) {
    case GgufValueType::UINT8:
    case GgufValueType::BOOL:
      e.u = ld(uint8_t{});
      break;
    case GgufValueType::INT8:
      e.i = ld(int8_t{});
      break;
    case GgufValueType::UINT16:
      e.u = ld(uint16_t{});
      break;
    case GgufValueType::INT16:
      e.i = ld(int16_t{});
      break;
    case GgufValueType::UINT32:
      e.u = ld(uint32_t{});
      break;
    case GgufValueType::INT32:
      e.i = ld(int32_t{});
      break;
    case GgufValueType::UINT64:
      e.u = ld(uint64_t{});
      break;
    case GgufValueType::INT64:
      e.i = ld(int64_t{});
      break;
    case GgufValueType::FLOAT32:
      e.f = ld(float{});
      break;
    case GgufValueType::FLOAT64:
      e.f = ld(double{});
      break;
    default:
      break;
  }
  return e;
}

std::vector<std::string> GgufValue::as_string_array(const std::string& key) const {
  VQ_CHECK(type == GgufValueType::ARRAY && elem_type == GgufValueType::STRING, FormatError,
           "metadata ", key, " is not an array of strings");
  std::vector<std::string> out;
  out.reserve(arr.size());
  for (const GgufValue& e : arr) out.push_back(e.str);
  return out;
}

std::vector<float> GgufValue::as_float_array(const std::string& key) const {
  VQ_CHECK(type == GgufValueType::ARRAY, FormatError, "metadata ", key, " is not an array");
  std::vector<float> out;
  out.reserve(static_cast<size_t>(count));
  for (uint64_t k = 0; k < count; ++k)
    out.push_back(static_cast<float>(element(k).as_float(key + "[]")));
  return out;
}

std::vector<int64_t> GgufValue::as_int_array(const std::string& key) const {
  VQ_CHECK(type == GgufValueType::ARRAY, FormatError, "metadata ", key, " is not an array");
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  for (uint64_t k = 0; k < count; ++k) out.push_back(element(k).as_int(key + "[]"));
  return out;
}

std::string GgufValue::describe() const {
  switch (type) {
    case GgufValueType::STRING:
      return str.size() <= 60 ? '"' + str + '"' : '"' + str.substr(0, 57) + "...\"";
    case GgufValueType::BOOL:
      return u ? "true" : "false";
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64:
      return detail::cat(f);
    case GgufValueType::ARRAY:
      return detail::cat("[", count, " ", gguf_value_type_name(uint32_t(elem_type)), "]");
    default:
      return is_unsigned(type) ? std::to_string(u) : std::to_string(i);
  }
}

// ------------------------------------------------------------------------------------------------
// GgufTensorInfo / GgufFile

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // bounded at parse time
  return n;
}

GgufFile GgufFile::open(const std::string& path, FileLoad how) {
  auto file = MappedFile::open(path, how);
  try {
    return parse(std::move(file));
  } catch (const FormatError& e) {
    VQ_THROW(FormatError, path, ": ", e.what());
  }
}

GgufFile GgufFile::parse(std::shared_ptr<const MappedFile> file) {
  GgufFile g;
  g.file_ = std::move(file);
  Cursor c(g.file_->data(), g.file_->size());
  c.need(4, "GGUF magic");
  VQ_CHECK(std::memcmp(g.file_->data(), "GGUF", 4) == 0, FormatError,
           "not a GGUF file (the first 4 bytes are not \"GGUF\")");
  (void)c.read<uint32_t>("magic");
  const uint32_t version = c.read<uint32_t>("GGUF version");
  // A big-endian GGUF v3 reads as 0x03000000 here.
  VQ_CHECK(version != 0x02000000u && version != 0x03000000u, FormatError,
           "big-endian GGUF files are not supported");
  VQ_CHECK(version == 2 || version == 3, FormatError, "GGUF version ", version,
           " is not supported (supported: 2, 3)");
  g.version_ = version;
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // A key/value needs at least 8 (key length) + 4 (type) + 1 bytes; a tensor info 8 + 4 + 8 + 4
  // + 8.
  VQ_CHECK(n_kv <= c.left() / 13, FormatError, "metadata count ", n_kv, " cannot fit in the ",
           c.left(), " bytes after the header");
  VQ_CHECK(n_tensors <= c.left() / 32, FormatError, "tensor count ", n_tensors,
           " cannot fit in the ", c.left(), " bytes after the header");

  g.kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string key = c.string(detail::cat("metadata key #", k), kMaxKeyBytes);
    VQ_CHECK(!key.empty(), FormatError, "metadata key #", k, " is empty");
    VQ_CHECK(g.kv_index_.find(key) == g.kv_index_.end(), FormatError, "metadata key ", key,
             " appears twice");
    const uint32_t t = c.read<uint32_t>("metadata " + key + " (type)");
    VQ_CHECK(valid_value_type(t), FormatError, "metadata ", key, ": value type ", t,
             " is not a GGUF value type (0..12)");
    GgufValue v = read_value(c, static_cast<GgufValueType>(t), key, 0);
    g.kv_index_.emplace(key, g.kv_.size());
    g.kv_.emplace_back(key, std::move(v));
  }

  if (const GgufValue* a = g.find("general.alignment")) {
    VQ_CHECK(a->is_integer(), FormatError, "general.alignment is ",
             gguf_value_type_name(uint32_t(a->type)), ", expected an integer");
    const int64_t al = a->as_int("general.alignment");
    VQ_CHECK(al > 0 && al <= (1 << 30) && (al & (al - 1)) == 0, FormatError,
             "general.alignment = ", al, " is not a power of two in [1, 2^30]");
    g.alignment_ = static_cast<uint64_t>(al);
  }

  g.tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    t.name = c.string(detail::cat("tensor #", k, " name"), kMaxKeyBytes);
    const std::string who = "tensor " + t.name;
    VQ_CHECK(g.tensor_index_.find(t.name) == g.tensor_index_.end(), FormatError, who,
             ": the name appears twice");
    const uint32_t nd = c.read<uint32_t>(who + " (rank)");
    VQ_CHECK(nd >= 1 && nd <= kMaxDims, FormatError, who, ": rank ", nd, " outside [1, ", kMaxDims,
             "]");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t n = c.read<uint64_t>(detail::cat(who, " (dim ", d, ")"));
      VQ_CHECK(n >= 1, FormatError, who, ": dim ", d, " is 0");
      VQ_CHECK(n <= (uint64_t{1} << 62) / numel, FormatError, who, ": dims overflow (dim ", d,
               " = ", n, " makes more than 2^62 elements)");
      numel *= n;
      t.dims.push_back(static_cast<int64_t>(n));
    }
    const uint32_t type = c.read<uint32_t>(who + " (type)");
    VQ_CHECK(ggml_type_supported(type), FormatError, who, ": tensor type ", ggml_type_name(type),
             " is not supported (supported: ", ggml_supported_types_list(), ")");
    t.type = static_cast<GgmlType>(type);
    const int64_t bv = ggml_block_values(t.type);
    VQ_CHECK(t.dims[0] % bv == 0, FormatError, who, ": first dim ", t.dims[0],
             " is not a multiple of the ", ggml_type_name(type), " block size ", bv);
    // numel < 2^62 and block bytes / block values <= 4, so this cannot overflow.
    t.bytes = ggml_row_bytes(t.type, static_cast<int64_t>(numel));
    t.offset = c.read<uint64_t>(who + " (offset)");
    VQ_CHECK(t.offset % g.alignment_ == 0, FormatError, who, ": offset ", t.offset,
             " is not a multiple of the alignment ", g.alignment_);
    g.tensor_index_.emplace(t.name, g.tensors_.size());
    g.tensors_.push_back(std::move(t));
  }

  // Tensor data starts at the next multiple of the alignment.
  const uint64_t end_infos = c.pos();
  const uint64_t pad = (g.alignment_ - end_infos % g.alignment_) % g.alignment_;
  g.data_offset_ = end_infos + pad;
  const uint64_t fsize = g.file_->size();
  if (!g.tensors_.empty()) {
    VQ_CHECK(g.data_offset_ <= fsize, FormatError, "the tensor data would start at offset ",
             g.data_offset_, ", past the end of the file (", fsize, " bytes)");
  }
  const uint64_t data_bytes = fsize >= g.data_offset_ ? fsize - g.data_offset_ : 0;
  std::vector<size_t> order(g.tensors_.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  for (const GgufTensorInfo& t : g.tensors_) {
    VQ_CHECK(t.offset <= data_bytes && t.bytes <= data_bytes - t.offset, FormatError, "tensor ",
             t.name, ": bytes [", t.offset, ", ", t.offset, " + ", t.bytes,
             ") of the data region lie outside it (", data_bytes,
             " bytes; file truncated or offset wrong)");
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return g.tensors_[a].offset < g.tensors_[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const GgufTensorInfo& prev = g.tensors_[order[k - 1]];
    const GgufTensorInfo& cur = g.tensors_[order[k]];
    VQ_CHECK(prev.offset + prev.bytes <= cur.offset, FormatError, "tensors ", prev.name, " (bytes ",
             prev.offset, "..", prev.offset + prev.bytes, ") and ", cur.name, " (from ", cur.offset,
             ") overlap");
  }
  return g;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufValue& GgufFile::get(const std::string& key) const {
  const GgufValue* v = find(key);
  VQ_CHECK(v != nullptr, FormatError, path(), ": metadata key ", key, " is missing");
  return *v;
}

int64_t GgufFile::get_int(const std::string& key, int64_t fallback) const {
  const GgufValue* v = find(key);
  return v ? v->as_int(key) : fallback;
}
double GgufFile::get_float(const std::string& key, double fallback) const {
  const GgufValue* v = find(key);
  return v ? v->as_float(key) : fallback;
}
std::string GgufFile::get_string(const std::string& key, const std::string& fallback) const {
  const GgufValue* v = find(key);
  return v ? v->as_string(key) : fallback;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* t = find_tensor(name);
  VQ_CHECK(t != nullptr, FormatError, path(), ": tensor ", name, " is missing");
  return *t;
}

const uint8_t* GgufFile::tensor_data(const GgufTensorInfo& t) const {
  return file_->data() + data_offset_ + t.offset;
}

std::vector<float> GgufFile::dequantize(const GgufTensorInfo& t) const {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  ggml_dequantize(t.type, tensor_data(t), out.data(), t.numel());
  return out;
}

void GgufFile::dequantize_rows(const GgufTensorInfo& t, int64_t row0, int64_t nrows,
                               float* out) const {
  const int64_t row = t.dims[0];
  const int64_t rows = t.numel() / row;
  VQ_CHECK(row0 >= 0 && nrows >= 0 && row0 <= rows && nrows <= rows - row0, InvalidArgument,
           "tensor ", t.name, ": rows [", row0, ", ", row0 + nrows, ") outside [0, ", rows, ")");
  const uint64_t row_bytes = ggml_row_bytes(t.type, row);
  ggml_dequantize(t.type, tensor_data(t) + static_cast<uint64_t>(row0) * row_bytes, out,
                  nrows * row);
}

}  // namespace vq

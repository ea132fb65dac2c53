// .npy reader and writer. Format reference: NumPy's "NEP 1 - A simple file format for NumPy
// arrays" (numpy/lib/format.py): magic "\x93NUMPY", major, minor, header length (u16 for 1.0,
// u32 for 2.0 and 3.0), then a Python dict literal with exactly the keys 'descr', 'fortran_order'
// and 'shape', padded with spaces and ended by '\n'; the raw array bytes follow.
#include "io/npy.hpp"

#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "veloxquant/errors.hpp"
#include "veloxquant/tensor.hpp"
#include "veloxquant/vqkv.hpp"

namespace vq {

const char* npy_descr(NpyDtype t) {
  switch (t) {
    case NpyDtype::Float32:
      return "<f4";
    case NpyDtype::Float16:
      return "<f2";
    case NpyDtype::BFloat16:
      return "<u2";
    case NpyDtype::Float64:
      return "<f8";
    case NpyDtype::Int64:
      return "<i8";
    case NpyDtype::Int32:
      return "<i4";
  }
  return "?";
}

const char* npy_dtype_name(NpyDtype t) {
  switch (t) {
    case NpyDtype::Float32:
      return "float32";
    case NpyDtype::Float16:
      return "float16";
    case NpyDtype::BFloat16:
      return "bfloat16";
    case NpyDtype::Float64:
      return "float64";
    case NpyDtype::Int64:
      return "int64";
    case NpyDtype::Int32:
      return "int32";
  }
  return "?";
}

size_t npy_dtype_size(NpyDtype t) {
  switch (t) {
    case NpyDtype::Float16:
    case NpyDtype::BFloat16:
      return 2;
    case NpyDtype::Float32:
    case NpyDtype::Int32:
      return 4;
    case NpyDtype::Float64:
    case NpyDtype::Int64:
      return 8;
  }
  return 0;
}

bool npy_is_float(NpyDtype t) {
  return t == NpyDtype::Float32 || t == NpyDtype::Float16 || t == NpyDtype::BFloat16 ||
         t == NpyDtype::Float64;
}

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string NpyArray::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<float> NpyArray::to_float() const {
  VQ_CHECK(npy_is_float(dtype), InvalidArgument, "expected a floating-point array, got ",
           npy_dtype_name(dtype), " ", shape_str());
  const size_t n = static_cast<size_t>(numel());
  VQ_CHECK(bytes.size() == n * npy_dtype_size(dtype), InvalidArgument, "array ", shape_str(),
           " of ", npy_dtype_name(dtype), " holds ", bytes.size(), " bytes, expected ",
           n * npy_dtype_size(dtype));
  std::vector<float> out(n);
  const uint8_t* p = bytes.data();
  switch (dtype) {
    case NpyDtype::Float32:
      if (n) std::memcpy(out.data(), p, n * 4);
      break;
    case NpyDtype::Float16:
    case NpyDtype::BFloat16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = dtype == NpyDtype::Float16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
      }
      break;
    case NpyDtype::Float64:
      for (size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        out[i] = static_cast<float>(d);
      }
      break;
    default:
      break;
  }
  return out;
}

std::vector<int64_t> NpyArray::to_int64() const {
  VQ_CHECK(dtype == NpyDtype::Int64 || dtype == NpyDtype::Int32, InvalidArgument,
           "expected an integer array, got ", npy_dtype_name(dtype), " ", shape_str());
  const size_t n = static_cast<size_t>(numel());
  VQ_CHECK(bytes.size() == n * npy_dtype_size(dtype), InvalidArgument, "array ", shape_str(),
           " holds ", bytes.size(), " bytes, expected ", n * npy_dtype_size(dtype));
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == NpyDtype::Int64) {
      std::memcpy(&out[i], bytes.data() + 8 * i, 8);
    } else {
      int32_t v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      out[i] = v;
    }
  }
  return out;
}

namespace npy {

constexpr uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

namespace {

// A cursor over the header dict text. Only the subset of Python literals NumPy writes is accepted.
class DictParser {
 public:
  DictParser(std::string_view s, const NpyReadOptions& opts) : s_(s), opts_(opts) {}

  Header parse() {
    Header h;
    bool have_descr = false, have_fortran = false, have_shape = false;
    ws();
    expect('{');
    ws();
    while (peek() != '}') {
      const std::string key = string_lit("a dict key");
      ws();
      expect(':');
      ws();
      if (key == "descr") {
        VQ_CHECK(!have_descr, FormatError, "npy header: key 'descr' appears twice");
        have_descr = true;
        if (peek() == '[')
          VQ_THROW(FormatError,
                   "npy header: structured dtypes (a list 'descr') are not "
                   "supported; save a plain float16/float32 array");
        h.dtype = dtype_from_descr(string_lit("the 'descr' value"), opts_);
      } else if (key == "fortran_order") {
        VQ_CHECK(!have_fortran, FormatError, "npy header: key 'fortran_order' appears twice");
        have_fortran = true;
        h.fortran_order = boolean();
      } else if (key == "shape") {
        VQ_CHECK(!have_shape, FormatError, "npy header: key 'shape' appears twice");
        have_shape = true;
        h.shape = shape_tuple();
      } else {
        VQ_THROW(FormatError, "npy header: unexpected key '", key,
                 "'; a .npy header has exactly 'descr', 'fortran_order' and 'shape'");
      }
      ws();
      if (peek() == ',') {
        ++i_;
        ws();
      } else {
        VQ_CHECK(peek() == '}', FormatError, "npy header: expected ',' or '}' at offset ", i_,
                 " but found ", shown());
      }
    }
    ++i_;
    ws();
    VQ_CHECK(i_ == s_.size(), FormatError, "npy header: unexpected text after the dict at offset ",
             i_, ": ", shown());
    VQ_CHECK(have_descr && have_fortran && have_shape, FormatError,
             "npy header: missing key(s):", have_descr ? "" : " 'descr'",
             have_fortran ? "" : " 'fortran_order'", have_shape ? "" : " 'shape'");
    return h;
  }

 private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  std::string shown() const {
    if (i_ >= s_.size()) return "the end of the header";
    return "'" + std::string(s_.substr(i_, 12)) + "'";
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  void expect(char c) {
    VQ_CHECK(peek() == c, FormatError, "npy header: expected '", c, "' at offset ", i_,
             " but found ", shown());
    ++i_;
  }
  std::string string_lit(const char* what) {
    const char q = peek();
    VQ_CHECK(q == '\'' || q == '"', FormatError, "npy header: expected a quoted string for ", what,
             " at offset ", i_, " but found ", shown());
    const size_t start = ++i_;
    while (i_ < s_.size() && s_[i_] != q) {
      VQ_CHECK(s_[i_] != '\\', FormatError,
               "npy header: escape sequences in strings are not "
               "supported (offset ",
               i_, ")");
      ++i_;
    }
    VQ_CHECK(i_ < s_.size(), FormatError, "npy header: unterminated string starting at offset ",
             start - 1);
    std::string out(s_.substr(start, i_ - start));
    ++i_;
    return out;
  }
  bool boolean() {
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    VQ_THROW(FormatError, "npy header: 'fortran_order' must be True or False, found ", shown());
  }
  int64_t integer() {
    const size_t start = i_;
    uint64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      const uint64_t digit = static_cast<uint64_t>(s_[i_] - '0');
      VQ_CHECK(v <= (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - digit) / 10,
               FormatError, "npy header: a shape dimension at offset ", start,
               " does not fit in a signed 64-bit integer");
      v = v * 10 + digit;
      ++i_;
    }
    VQ_CHECK(i_ > start, FormatError,
             "npy header: expected a non-negative integer dimension at "
             "offset ",
             start, " but found ", shown());
    if (peek() == 'L') ++i_;  // Python 2 long suffix, written by very old NumPy
    return static_cast<int64_t>(v);
  }
  std::vector<int64_t> shape_tuple() {
    std::vector<int64_t> shape;
    expect('(');
    ws();
    while (peek() != ')') {
      VQ_CHECK(shape.size() < kMaxRank, FormatError, "npy header: shape has more than ", kMaxRank,
               " dimensions");
      shape.push_back(integer());
      ws();
      if (peek() == ',') {
        ++i_;
        ws();
      } else {
        VQ_CHECK(peek() == ')', FormatError,
                 "npy header: expected ',' or ')' in 'shape' at "
                 "offset ",
                 i_, " but found ", shown());
      }
    }
    ++i_;
    return shape;
  }

  std::string_view s_;
  const NpyReadOptions& opts_;
  size_t i_ = 0;
};

uint16_t rd16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t rd32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// Header + size checks shared by the file and memory readers. `total` is the full file size.
Header check_header(const Prefix& pre, const uint8_t* header_text, uint64_t total,
                    const NpyReadOptions& opts, uint64_t* data_off, uint64_t* nbytes) {
  const std::string_view text(reinterpret_cast<const char*>(header_text),
                              static_cast<size_t>(pre.header_len));
  Header h = parse_header(text, opts);
  *data_off = pre.prefix_bytes + pre.header_len;
  *nbytes = data_bytes(h);
  const uint64_t have = total - *data_off;
  VQ_CHECK(have >= *nbytes, FormatError, "npy: truncated data: shape ",
           NpyArray{h.dtype, h.shape, {}}.shape_str(), " of ", npy_dtype_name(h.dtype), " needs ",
           *nbytes, " bytes after the header but the file has ", have);
  VQ_CHECK(have == *nbytes, FormatError, "npy: the header says shape ",
           NpyArray{h.dtype, h.shape, {}}.shape_str(), " of ", npy_dtype_name(h.dtype), " (",
           *nbytes, " bytes) but ", have, " bytes follow the header");
  return h;
}

}  // namespace

NpyDtype dtype_from_descr(std::string_view d, const NpyReadOptions& opts) {
  const std::string ds(d);
  VQ_CHECK(d.size() >= 2, FormatError, "npy: unsupported dtype '", ds, "'");
  const char order = d[0];
  const std::string_view kind = d.substr(1);
  if (order == '>')
    VQ_THROW(FormatError, "npy: big-endian data ('", ds,
             "') is not supported; convert with x.astype(x.dtype.newbyteorder('<'))");
  if (order == '<') {
    if (kind == "f4") return NpyDtype::Float32;
    if (kind == "f2") return NpyDtype::Float16;
    if (kind == "f8") return NpyDtype::Float64;
    if (kind == "i8") return NpyDtype::Int64;
    if (kind == "i4") return NpyDtype::Int32;
    if (kind == "u2") {
      VQ_CHECK(opts.u2_as_bfloat16, FormatError,
               "npy: dtype '<u2' (uint16) is not supported for KV data; if it holds bfloat16 bit "
               "patterns, say so (bfloat16 option), else save float16 or float32");
      return NpyDtype::BFloat16;
    }
  }
  VQ_THROW(FormatError, "npy: unsupported dtype '", ds,
           "'; KV data must be '<f2' (float16), '<f4' (float32), '<f8' (float64) or '<u2' "
           "holding bfloat16 (the reader also takes '<i8' / '<i4' for position arrays)");
}

Header parse_header(std::string_view text, const NpyReadOptions& opts) {
  Header h = DictParser(text, opts).parse();
  if (h.fortran_order) {
    // Fortran and C order are the same layout when at most one dimension exceeds 1.
    int big = 0;
    for (int64_t d : h.shape) big += d > 1;
    VQ_CHECK(big <= 1, FormatError, "npy: Fortran-ordered arrays (shape ",
             NpyArray{h.dtype, h.shape, {}}.shape_str(),
             ") are not supported; save np.ascontiguousarray(x) instead");
    h.fortran_order = false;
  }
  return h;
}

uint64_t data_bytes(const Header& h) {
  // Limit to 2^62 bytes so that offsets and sizes stay far from signed overflow anywhere.
  const uint64_t limit = uint64_t{1} << 62;
  uint64_t n = npy_dtype_size(h.dtype);
  for (int64_t d : h.shape) {
    if (d == 0) return 0;
    const uint64_t ud = static_cast<uint64_t>(d);
    VQ_CHECK(n <= limit / ud, FormatError, "npy: shape ",
             NpyArray{h.dtype, h.shape, {}}.shape_str(), " of ", npy_dtype_name(h.dtype),
             " needs more than 2^62 bytes");
    n *= ud;
  }
  return n;
}

Prefix parse_prefix(const uint8_t* p, uint64_t n) {
  VQ_CHECK(n >= 10, FormatError, "npy: file of ", n, " bytes is too short for a .npy header");
  VQ_CHECK(std::memcmp(p, kMagic, 6) == 0, FormatError,
           "npy: bad magic (not a .npy file; expected \\x93NUMPY)");
  Prefix pre;
  pre.major = p[6];
  pre.minor = p[7];
  VQ_CHECK(pre.major >= 1 && pre.major <= 3 && pre.minor == 0, FormatError, "npy: format version ",
           pre.major, ".", pre.minor, " is not supported (1.0, 2.0, 3.0 are)");
  if (pre.major == 1) {
    pre.prefix_bytes = 10;
    pre.header_len = rd16(p + 8);
  } else {
    VQ_CHECK(n >= 12, FormatError, "npy: file of ", n, " bytes is too short for a version ",
             pre.major, " header");
    pre.prefix_bytes = 12;
    pre.header_len = rd32(p + 8);
  }
  VQ_CHECK(pre.header_len <= kMaxHeaderBytes, FormatError, "npy: header length ", pre.header_len,
           " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  VQ_CHECK(pre.header_len <= n - pre.prefix_bytes, FormatError, "npy: truncated header: length ",
           pre.header_len, " but only ", n - pre.prefix_bytes, " bytes follow");
  return pre;
}

}  // namespace npy

NpyArray parse_npy(const void* data, size_t size, const NpyReadOptions& opts) {
  const auto* p = static_cast<const uint8_t*>(data);
  VQ_CHECK(p != nullptr || size == 0, InvalidArgument, "parse_npy: null buffer of ", size,
           " bytes");
  const npy::Prefix pre = npy::parse_prefix(p, size);
  uint64_t off = 0, nbytes = 0;
  npy::Header h = npy::check_header(pre, p + pre.prefix_bytes, size, opts, &off, &nbytes);
  NpyArray a;
  a.dtype = h.dtype;
  a.shape = std::move(h.shape);
  a.bytes.assign(p + off, p + off + nbytes);
  return a;
}

namespace {
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;
}  // namespace

NpyArray read_npy(const std::string& path, const NpyReadOptions& opts) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  VQ_CHECK(f, IoError, "cannot open '", path, "': ", std::strerror(errno));
  auto read_exact = [&](void* dst, size_t n) {
    if (n == 0) return;
    if (std::fread(dst, 1, n, f.get()) != n)
      VQ_THROW(IoError, "cannot read '", path,
               "': ", std::ferror(f.get()) ? std::strerror(errno) : "unexpected end of file");
  };
  off_t end = -1;
  if (fseeko(f.get(), 0, SEEK_END) == 0) end = ftello(f.get());
  VQ_CHECK(end >= 0 && fseeko(f.get(), 0, SEEK_SET) == 0, IoError, "cannot read '", path,
           "': not a regular, seekable file");
  const uint64_t total = static_cast<uint64_t>(end);
  try {
    uint8_t head[12] = {};
    const size_t nhead = static_cast<size_t>(std::min<uint64_t>(total, 12));
    read_exact(head, nhead);
    const npy::Prefix pre = npy::parse_prefix(head, total);
    // Only the prefix has been read; the rest of a short (version 1) prefix is header text.
    std::string text(static_cast<size_t>(pre.header_len), '\0');
    const size_t already = nhead - pre.prefix_bytes;
    const size_t from_head = std::min(already, text.size());
    std::memcpy(text.data(), head + pre.prefix_bytes, from_head);
    read_exact(text.data() + from_head, text.size() - from_head);
    uint64_t off = 0, nbytes = 0;
    npy::Header h = npy::check_header(pre, reinterpret_cast<const uint8_t*>(text.data()), total,
                                      opts, &off, &nbytes);
    NpyArray a;
    a.dtype = h.dtype;
    a.shape = std::move(h.shape);
    VQ_CHECK(nbytes <= std::numeric_limits<size_t>::max(), FormatError, "npy: ", nbytes,
             " bytes of data do not fit in memory on this platform");
    a.bytes.resize(static_cast<size_t>(nbytes));
    if (fseeko(f.get(), static_cast<off_t>(off), SEEK_SET) != 0)
      VQ_THROW(IoError, "cannot seek in '", path, "'");
    read_exact(a.bytes.data(), a.bytes.size());
    return a;
  } catch (const FormatError& e) {
    VQ_THROW(FormatError, path, ": ", e.what());
  }
}

std::vector<uint8_t> encode_npy(const NpyArray& a) {
  VQ_CHECK(a.shape.size() <= npy::kMaxRank, InvalidArgument, "encode_npy: rank ", a.shape.size(),
           " exceeds ", npy::kMaxRank);
  for (int64_t d : a.shape)
    VQ_CHECK(d >= 0, InvalidArgument, "encode_npy: shape ", a.shape_str(),
             " has a negative dimension");
  const uint64_t need = npy::data_bytes(npy::Header{a.dtype, a.shape, false});
  VQ_CHECK(a.bytes.size() == need, InvalidArgument, "encode_npy: shape ", a.shape_str(), " of ",
           npy_dtype_name(a.dtype), " needs ", need, " bytes but the array holds ", a.bytes.size());
  std::string dict =
      std::string("{'descr': '") + npy_descr(a.dtype) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < a.shape.size(); ++i) {
    dict += std::to_string(a.shape[i]);
    if (a.shape.size() == 1 || i + 1 < a.shape.size()) dict += ",";
    if (i + 1 < a.shape.size()) dict += " ";
  }
  dict += "), }";
  // Pad with spaces so that magic + length + dict + '\n' is a multiple of 64 bytes.
  size_t prefix = 10;
  size_t len = dict.size() + 1;
  size_t padded = (prefix + len + 63) / 64 * 64 - prefix;
  int major = 1;
  if (padded > 65535) {
    major = 2;
    prefix = 12;
    padded = (prefix + len + 63) / 64 * 64 - prefix;
  }
  dict.append(padded - len, ' ');
  dict += '\n';
  std::vector<uint8_t> out(prefix + dict.size() + a.bytes.size());
  std::memcpy(out.data(), npy::kMagic, 6);
  out[6] = static_cast<uint8_t>(major);
  out[7] = 0;
  const uint64_t hl = dict.size();
  for (size_t b = 0; b < prefix - 8; ++b) out[8 + b] = static_cast<uint8_t>(hl >> (8 * b));
  std::memcpy(out.data() + prefix, dict.data(), dict.size());
  if (!a.bytes.empty())
    std::memcpy(out.data() + prefix + dict.size(), a.bytes.data(), a.bytes.size());
  return out;
}

void write_npy(const std::string& path, const NpyArray& a) {
  write_file_bytes(path, encode_npy(a));  // atomic: temporary file + rename (vqkv.hpp)
}

namespace {
std::vector<int64_t> checked_shape(std::vector<int64_t> shape, const char* who) {
  VQ_CHECK(shape.size() <= npy::kMaxRank, InvalidArgument, who, ": rank ", shape.size(),
           " exceeds ", npy::kMaxRank);
  for (int64_t d : shape)
    VQ_CHECK(d >= 0, InvalidArgument, who, ": shape has a negative dimension ", d);
  return shape;
}
}  // namespace

NpyArray npy_from_float(const float* data, std::vector<int64_t> shape, NpyDtype dtype) {
  NpyArray a;
  a.dtype = dtype;
  a.shape = checked_shape(std::move(shape), "npy_from_float");
  VQ_CHECK(dtype == NpyDtype::Float32 || dtype == NpyDtype::Float16 || dtype == NpyDtype::BFloat16,
           InvalidArgument, "npy_from_float: dtype ", npy_dtype_name(dtype),
           " is not one of float32, float16, bfloat16");
  const uint64_t nbytes = npy::data_bytes(npy::Header{dtype, a.shape, false});
  const size_t n = static_cast<size_t>(nbytes / npy_dtype_size(dtype));
  VQ_CHECK(n == 0 || data != nullptr, InvalidArgument, "npy_from_float: null data for ", n,
           " elements");
  a.bytes.resize(static_cast<size_t>(nbytes));
  if (dtype == NpyDtype::Float32) {
    if (n) std::memcpy(a.bytes.data(), data, n * 4);
  } else {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = dtype == NpyDtype::Float16 ? fp32_to_fp16(data[i]) : fp32_to_bf16(data[i]);
      std::memcpy(a.bytes.data() + 2 * i, &h, 2);
    }
  }
  return a;
}

NpyArray npy_from_int64(const int64_t* data, std::vector<int64_t> shape) {
  NpyArray a;
  a.dtype = NpyDtype::Int64;
  a.shape = checked_shape(std::move(shape), "npy_from_int64");
  const uint64_t nbytes = npy::data_bytes(npy::Header{a.dtype, a.shape, false});
  VQ_CHECK(nbytes == 0 || data != nullptr, InvalidArgument, "npy_from_int64: null data");
  a.bytes.resize(static_cast<size_t>(nbytes));
  if (nbytes) std::memcpy(a.bytes.data(), data, static_cast<size_t>(nbytes));
  return a;
}

}  // namespace vq

// Test helpers: minimal GGUF and safetensors writers from the public format descriptions, used
// to build valid files, quantized variants and hostile variants for the reader tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace vqtest {

using Bytes = std::vector<uint8_t>;

struct ByteSink {
  Bytes b;
  template <typename T>
  void put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
};

/// Builds a GGUF file. Metadata values are appended already encoded (type id + payload), so a
/// test can write any type, including nested arrays and deliberately wrong ones.
class GgufWriter {
 public:
  uint32_t version = 3;
  uint64_t alignment = 32;
  bool write_alignment_key = false;
  /// Offsets where the sections end in the last build() (for truncation tests).
  size_t end_header = 0, end_kv = 0, end_infos = 0, data_start = 0;

  void kv_raw(const std::string& key, uint32_t type, const Bytes& payload) {
    kvs_.push_back({key, type, payload});
  }
  template <typename T>
  void kv(const std::string& key, uint32_t type, T v) {
    ByteSink s;
    s.put<T>(v);
    kv_raw(key, type, s.b);
  }
  void kv_string(const std::string& key, const std::string& v) {
    ByteSink s;
    s.str(v);
    kv_raw(key, 8, s.b);
  }
  void kv_string_array(const std::string& key, const std::vector<std::string>& v) {
    ByteSink s;
    s.put<uint32_t>(8);
    s.put<uint64_t>(v.size());
    for (const auto& x : v) s.str(x);
    kv_raw(key, 9, s.b);
  }
  template <typename T>
  void kv_array(const std::string& key, uint32_t elem_type, const std::vector<T>& v) {
    ByteSink s;
    s.put<uint32_t>(elem_type);
    s.put<uint64_t>(v.size());
    for (const T& x : v) s.put<T>(x);
    kv_raw(key, 9, s.b);
  }

  /// A tensor with explicit bytes; offset = UINT64_MAX places it after the previous one, aligned.
  void tensor(const std::string& name, uint32_t type, std::vector<uint64_t> dims, Bytes data,
              uint64_t offset = UINT64_MAX) {
    tensors_.push_back({name, type, std::move(dims), std::move(data), offset});
  }
  void tensor_f32(const std::string& name, std::vector<uint64_t> dims,
                  const std::vector<float>& v) {
    Bytes d(v.size() * 4);
    if (!d.empty()) std::memcpy(d.data(), v.data(), d.size());
    tensor(name, 0, std::move(dims), std::move(d));
  }

  Bytes build() {
    ByteSink s;
    s.b.insert(s.b.end(), {'G', 'G', 'U', 'F'});
    s.put<uint32_t>(version);
    s.put<uint64_t>(tensors_.size());
    s.put<uint64_t>(kvs_.size() + (write_alignment_key ? 1 : 0));
    end_header = s.b.size();
    if (write_alignment_key) {
      s.str("general.alignment");
      s.put<uint32_t>(4);
      s.put<uint32_t>(static_cast<uint32_t>(alignment));
    }
    for (const auto& k : kvs_) {
      s.str(k.key);
      s.put<uint32_t>(k.type);
      s.b.insert(s.b.end(), k.payload.begin(), k.payload.end());
    }
    end_kv = s.b.size();
    std::vector<uint64_t> offs;
    uint64_t cur = 0;
    for (const auto& t : tensors_) {
      uint64_t o = t.offset;
      if (o == UINT64_MAX) {
        o = (cur + alignment - 1) / alignment * alignment;
        cur = o + t.data.size();
      }
      offs.push_back(o);
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      s.str(t.name);
      s.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) s.put<uint64_t>(d);
      s.put<uint32_t>(t.type);
      s.put<uint64_t>(offs[i]);
    }
    end_infos = s.b.size();
    while (s.b.size() % alignment) s.b.push_back(0);
    data_start = s.b.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      if (data_start + offs[i] + t.data.size() > s.b.size())
        s.b.resize(data_start + offs[i] + t.data.size(), 0);
      if (!t.data.empty())
        std::memcpy(s.b.data() + data_start + offs[i], t.data.data(), t.data.size());
    }
    return s.b;
  }

 private:
  struct Kv {
    std::string key;
    uint32_t type;
    Bytes payload;
  };
  struct T {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> dims;
    Bytes data;
    uint64_t offset;
  };
  std::vector<Kv> kvs_;
  std::vector<T> tensors_;
};

/// Builds a safetensors file from (name, dtype, shape, bytes); offsets packed in order unless
/// a test edits the header JSON before build().
class SafetensorsWriter {
 public:
  nlohmann::json header = nlohmann::json::object();
  Bytes data;
  void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
           const Bytes& bytes) {
    const uint64_t b = data.size();
    data.insert(data.end(), bytes.begin(), bytes.end());
    header[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {b, data.size()}}};
  }
  void add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    Bytes d(v.size() * 4);
    if (!d.empty()) std::memcpy(d.data(), v.data(), d.size());
    add(name, "F32", std::move(shape), d);
  }
  Bytes build() const {
    std::string h = header.dump();
    while (h.size() % 8) h += ' ';
    ByteSink s;
    s.put<uint64_t>(h.size());
    s.b.insert(s.b.end(), h.begin(), h.end());
    s.b.insert(s.b.end(), data.begin(), data.end());
    return s.b;
  }
};

}  // namespace vqtest

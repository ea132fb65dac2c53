// The `veloxquant` Python module (pybind11 + NumPy).
//
//   import veloxquant as vq
//   vq.methods()                                   # registered method ids
//   cache = vq.Cache("curdkv:budget=64", head_dim=64)
//   k, v, pos = cache.update_and_fetch(keys, values, queries=None)   # NumPy [B, H, S, D]
//   cache.stats                                    # dict of byte-accounting fields
//   blob = vq.compress(x, "kvtc:bit_budget=128")   # bytes of the .vqkv format
//   x2 = vq.decompress(blob)
//
// Every vq::Error surfaces as ValueError carrying the library's message.
//
// Threads: calls release the GIL while the library works, so separate objects run in parallel in
// separate threads. Each Cache holds a mutex: concurrent calls on one Cache are serialized (run
// one after the other, in some order), never interleaved. Arrays may be float16,
// float32 or float64 (converted to fp32 internally); results come back in the input's float type
// (float16 stays float16, everything else is float32).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "veloxquant/cache.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/npy.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/tensor.hpp"
#include "veloxquant/vqkv.hpp"

namespace py = pybind11;

namespace {

// The NumPy float kind of `a` as a stored dtype; ValueError for anything that is not a float.
vq::NpyDtype float_kind(const py::array& a, const char* what) {
  const py::dtype dt = a.dtype();
  if (dt.kind() == 'f') {
    if (dt.itemsize() == 2) return vq::NpyDtype::Float16;
    if (dt.itemsize() == 4) return vq::NpyDtype::Float32;
    if (dt.itemsize() == 8) return vq::NpyDtype::Float64;
  }
  throw py::value_error(std::string(what) + ": dtype " + dt.attr("name").cast<std::string>() +
                        " is not supported; pass float16, float32 or float64");
}

// Any float array as contiguous fp32 values plus its shape and original kind.
struct Floats {
  std::vector<float> values;
  std::vector<int64_t> shape;
  vq::NpyDtype kind = vq::NpyDtype::Float32;
};

Floats to_floats(const py::array& a, const char* what) {
  Floats f;
  f.kind = float_kind(a, what);
  for (py::ssize_t i = 0; i < a.ndim(); ++i) f.shape.push_back(static_cast<int64_t>(a.shape(i)));
  if (f.kind == vq::NpyDtype::Float16) {
    // NumPy float16 is IEEE binary16: widen the bit patterns exactly.
    const py::object bits = a.attr("view")(py::str("uint16"));
    const auto c = py::array_t<uint16_t, py::array::c_style | py::array::forcecast>::ensure(bits);
    if (!c) throw py::value_error(std::string(what) + ": cannot read the float16 data");
    f.values.resize(static_cast<size_t>(c.size()));
    const uint16_t* p = c.data();
    for (size_t i = 0; i < f.values.size(); ++i) f.values[i] = vq::fp16_to_fp32(p[i]);
  } else {
    const auto c = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
    if (!c) throw py::value_error(std::string(what) + ": cannot convert to float32");
    f.values.assign(c.data(), c.data() + c.size());
  }
  return f;
}

vq::Tensor to_tensor(const py::array& a, const char* what) {
  if (a.ndim() != 4)
    throw py::value_error(std::string(what) + ": expected a 4-d array [B, H, S, D], got " +
                          std::to_string(a.ndim()) + " dimensions");
  const Floats f = to_floats(a, what);
  return vq::Tensor::from_fp32(f.values.data(), f.shape[0], f.shape[1], f.shape[2], f.shape[3]);
}

// A tensor as a NumPy array of `kind` (float16 or float32).
py::array from_tensor(const vq::Tensor& t, vq::NpyDtype kind) {
  const std::vector<py::ssize_t> shape = {t.B(), t.H(), t.S(), t.D()};
  if (kind == vq::NpyDtype::Float16) {
    py::array out(py::dtype("float16"), shape);
    auto* p = static_cast<uint16_t*>(out.mutable_data());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = vq::fp32_to_fp16(t.data()[i]);
    return out;
  }
  py::array_t<float> out(shape);
  if (t.numel() > 0)
    std::memcpy(out.mutable_data(), t.data(), sizeof(float) * static_cast<size_t>(t.numel()));
  return out;
}

py::dict stats_dict(const vq::CacheStats& s) {
  py::dict d;
  d["tokens_seen"] = s.tokens_seen;
  d["tokens_kept"] = s.tokens_kept;
  d["kept_bytes"] = s.kept_bytes;
  d["full_seq_bytes"] = s.full_seq_bytes;
  d["compression_ratio"] = s.compression_ratio;
  for (const auto& [k, v] : s.extra) d[py::str(k)] = v;
  return d;
}

class PyCache {
 public:
  PyCache(const std::string& spec, int64_t head_dim, int64_t layer, int64_t n_layers, uint64_t seed)
      : cache_(vq::make_cache(vq::CacheConfig::parse(spec), head_dim, layer, n_layers, seed)) {}

  void update(const py::array& keys, const py::array& values, const py::object& queries) {
    out_kind_ = float_kind(keys, "keys") == vq::NpyDtype::Float16 ? vq::NpyDtype::Float16
                                                                  : vq::NpyDtype::Float32;
    const vq::Tensor k = to_tensor(keys, "keys");
    const vq::Tensor v = to_tensor(values, "values");
    // The lock is taken with the GIL released (a thread holding it may be waiting for the GIL).
    if (queries.is_none()) {
      py::gil_scoped_release nogil;
      const std::lock_guard<std::mutex> lock(mu_);
      cache_->update(k, v);
    } else {
      const vq::Tensor q = to_tensor(queries.cast<py::array>(), "queries");
      py::gil_scoped_release nogil;
      const std::lock_guard<std::mutex> lock(mu_);
      cache_->update(k, v, &q);
    }
  }

  py::tuple fetch() const {
    vq::FetchResult r;
    {
      py::gil_scoped_release nogil;
      const std::lock_guard<std::mutex> lock(mu_);
      r = cache_->fetch();
    }
    const int64_t B = r.keys.B(), H = r.keys.H(), n = r.n_kept;
    py::array_t<int64_t> pos(std::vector<py::ssize_t>{B, H, n});
    if (!r.positions.empty())
      std::memcpy(pos.mutable_data(), r.positions.data(), sizeof(int64_t) * r.positions.size());
    return py::make_tuple(from_tensor(r.keys, out_kind_), from_tensor(r.values, out_kind_), pos);
  }

  /// fn(cache) under the object's lock (taken with the GIL released).
  template <typename Fn>
  auto locked(Fn fn) const {
    py::gil_scoped_release nogil;
    const std::lock_guard<std::mutex> lock(mu_);
    return fn(static_cast<const vq::KVCache&>(*cache_));
  }

 private:
  std::unique_ptr<vq::KVCache> cache_;
  mutable std::mutex mu_;
  vq::NpyDtype out_kind_ = vq::NpyDtype::Float32;
};

py::bytes compress(const py::array& x, const std::string& spec) {
  const Floats f = to_floats(x, "compress");
  const vq::CacheConfig config = vq::CacheConfig::parse(spec);
  std::vector<uint8_t> file;
  {
    py::gil_scoped_release nogil;
    file = vq::vqkv_compress(f.values.data(), f.shape, config, f.kind);
  }
  return py::bytes(reinterpret_cast<const char*>(file.data()), file.size());
}

// The bytes of any object with the buffer protocol (bytes, bytearray, memoryview, a NumPy uint8
// array, mmap), copied so that no other thread can change them while the GIL is released.
std::vector<uint8_t> blob_bytes(const py::object& blob, const char* what) {
  Py_buffer view;
  if (PyObject_GetBuffer(blob.ptr(), &view, PyBUF_SIMPLE) != 0) {
    PyErr_Clear();
    throw py::type_error(std::string(what) +
                         ": expected bytes or a contiguous byte buffer "
                         "(bytearray, memoryview, NumPy uint8 array), got " +
                         py::str(py::type::of(blob).attr("__name__")).cast<std::string>());
  }
  const auto* p = static_cast<const uint8_t*>(view.buf);
  std::vector<uint8_t> out(p, p + view.len);
  PyBuffer_Release(&view);
  return out;
}

py::array decompress(const py::object& blob_obj, const py::object& dtype) {
  const std::vector<uint8_t> blob = blob_bytes(blob_obj, "decompress");
  vq::VqkvArray a;
  {
    py::gil_scoped_release nogil;
    a = vq::vqkv_decompress(blob.data(), blob.size());
  }
  std::vector<py::ssize_t> shape(a.shape.begin(), a.shape.end());
  bool half = a.header.source_dtype == vq::NpyDtype::Float16;
  if (!dtype.is_none()) {
    const py::dtype want = py::dtype::from_args(dtype);
    if (want.kind() != 'f' || (want.itemsize() != 2 && want.itemsize() != 4))
      throw py::value_error("decompress: dtype must be float16 or float32");
    half = want.itemsize() == 2;
  }
  if (half) {
    py::array out(py::dtype("float16"), shape);
    auto* p = static_cast<uint16_t*>(out.mutable_data());
    for (size_t i = 0; i < a.values.size(); ++i) {
      p[i] = vq::fp32_to_fp16(a.values[i]);
      if ((p[i] & 0x7FFFu) == 0x7C00u)
        throw py::value_error("decompress: value " + std::to_string(a.values[i]) + " at index " +
                              std::to_string(i) +
                              " is outside float16's range [-65504, 65504]; ask for "
                              "dtype='float32'");
    }
    return out;
  }
  py::array_t<float> out(shape);
  if (!a.values.empty())
    std::memcpy(out.mutable_data(), a.values.data(), sizeof(float) * a.values.size());
  return out;
}

py::dict vqkv_info(const py::object& blob_obj) {
  const std::vector<uint8_t> blob = blob_bytes(blob_obj, "info");
  const vq::VqkvIndex idx = vq::vqkv_parse(blob.data(), blob.size());
  const vq::VqkvHeader& h = idx.header;
  py::dict d;
  d["format_version"] = h.version;
  d["layout"] = vq::vqkv_layout_name(h.layout);
  d["shape"] = py::tuple(py::cast(h.shape()));
  d["source_dtype"] = vq::npy_dtype_name(h.source_dtype);
  d["method"] = h.spec;
  d["file_bytes"] = idx.file_bytes;
  d["header_bytes"] = idx.header_bytes;
  d["compression_ratio"] = idx.file_bytes > 0 ? 2.0 * static_cast<double>(h.numel()) /
                                                    static_cast<double>(idx.file_bytes)
                                              : 1.0;
  py::list secs;
  for (const auto& s : idx.sections) {
    py::dict e;
    e["layer"] = s.layer;
    e["kind"] = vq::vqkv_kind_name(s.kind);
    e["head"] = s.head;
    e["offset"] = s.offset;
    e["bytes"] = s.size;
    secs.append(e);
  }
  d["sections"] = secs;
  return d;
}

py::dict method_info(const std::string& id) {
  const vq::MethodInfo& m = vq::find_method(id);
  py::dict d;
  d["id"] = m.id;
  d["family"] = vq::family_name(m.family);
  d["description"] = m.description;
  d["heads_coupled"] = m.heads_coupled;
  py::list opts;
  for (const auto& o : m.options) {
    py::dict od;
    od["name"] = o.name;
    od["type"] = vq::option_type_name(o.type);
    od["default"] = o.default_value;
    od["help"] = o.help;
    if (!o.choices.empty()) od["choices"] = o.choices;
    opts.append(od);
  }
  d["options"] = opts;
  return d;
}

}  // namespace

PYBIND11_MODULE(veloxquant, m) {
  m.doc() =
      "VeloxQuant: KV-cache compression (token eviction and transform coding). Methods are "
      "named by spec strings such as 'curdkv:budget=512' or 'kvtc:bit_budget=128'.";
  m.attr("__version__") = "0.1.0";

  // vq::Error (and its subclasses) -> ValueError with the library's message.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const vq::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  m.def(
      "methods",
      [] {
        std::vector<std::string> ids;
        for (const auto& mi : vq::methods()) ids.push_back(mi.id);
        return ids;
      },
      "Ids of every registered method, in registry order.");
  m.def("method_info", &method_info, py::arg("id"),
        "Description, family and options (name, type, default, help) of one method.");
  m.def(
      "canonical_spec",
      [](const std::string& spec, bool all) { return vq::CacheConfig::parse(spec).to_string(all); },
      py::arg("spec"), py::arg("all") = false,
      "Parse and re-print a spec string (all=True spells out every default).");

  py::class_<PyCache>(m, "Cache",
                      "One layer's KV cache built from a method spec. Arrays are [B, H, S, D].")
      .def(py::init<const std::string&, int64_t, int64_t, int64_t, uint64_t>(), py::arg("spec"),
           py::arg("head_dim"), py::arg("layer") = 0, py::arg("n_layers") = 1, py::arg("seed") = 0)
      .def("update", &PyCache::update, py::arg("keys"), py::arg("values"),
           py::arg("queries") = py::none(),
           "Append tokens: keys/values [B, H, S, D]; queries [B, Hq, S, D] (optional).")
      .def(
          "update_and_fetch",
          [](PyCache& c, const py::array& k, const py::array& v, const py::object& q) {
            c.update(k, v, q);
            return c.fetch();
          },
          py::arg("keys"), py::arg("values"), py::arg("queries") = py::none(),
          "update(), then return (keys, values, positions) of what is kept, sorted by position: "
          "[B, H, n, D], [B, H, n, D], int64 [B, H, n].")
      .def("fetch", &PyCache::fetch, "(keys, values, positions) of what is kept.")
      .def_property_readonly(
          "stats",
          [](const PyCache& c) {
            return stats_dict(c.locked([](const vq::KVCache& k) { return k.stats(); }));
          },
          "Byte accounting: tokens_seen, tokens_kept, kept_bytes, "
          "full_seq_bytes, compression_ratio and method-specific fields.")
      .def_property_readonly(
          "offset",
          [](const PyCache& c) {
            return c.locked([](const vq::KVCache& k) { return k.offset(); });
          },
          "Positions seen so far.")
      .def_property_readonly("head_dim",
                             [](const PyCache& c) {
                               return c.locked([](const vq::KVCache& k) { return k.head_dim(); });
                             })
      .def_property_readonly(
          "spec",
          [](const PyCache& c) {
            return c.locked([](const vq::KVCache& k) { return k.config().to_string(); });
          })
      .def("__repr__", [](const PyCache& c) {
        return c.locked([](const vq::KVCache& k) {
          return "veloxquant.Cache('" + k.config().to_string() +
                 "', head_dim=" + std::to_string(k.head_dim()) +
                 ", offset=" + std::to_string(k.offset()) + ")";
        });
      });

  m.def("compress", &compress, py::arg("x"), py::arg("spec"),
        "Compress a float array [S, D], [H, S, D], [L, H, S, D] or [L, 2, H, S, D] with a "
        "transform method; returns the bytes of a .vqkv file (identical to `veloxquant "
        "compress`).");
  m.def("decompress", &decompress, py::arg("blob"), py::arg("dtype") = py::none(),
        "Decode .vqkv bytes (bytes, bytearray, memoryview, NumPy uint8 array: any contiguous "
        "byte buffer) into an array of the original shape (float16 when the source was float16, "
        "else float32; or the dtype given). A float16 result refuses values beyond +-65504.");
  m.def("info", &vqkv_info, py::arg("blob"),
        "Header and sections of .vqkv bytes or any contiguous byte buffer (checksums verified).");
}

// The `veloxquant` Python module (pybind11 + NumPy).
//
//   import veloxquant as vq
//   vq.methods()                                   # registered method ids
//   cache = vq.Cache("curdkv:budget=64", head_dim=64)
//   k, v, pos = cache.update_and_fetch(keys, values, queries=None)   # NumPy [B, H, S, D]
//   cache.stats                                    # dict of byte-accounting fields
//   blob = vq.compress(x, "kvtc:bit_budget=128")   # bytes of the .vqkv format
//   x2 = vq.decompress(blob)
//   m = vq.Model("stories260K.gguf")              # or a HF directory, or a .bin (+ tokenizer=)
//   m.tokenize("Once upon a time")                 # token ids (BOS first)
//   m.generate("Once upon a time", method="snapkv:budget=64+q8_0", steps=32)   # greedy text
//   m.evaluate(text="...", methods=["q8_0"])       # KL / perplexity vs full, as `veloxquant eval`
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

#include "eval/fidelity.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/mapped_file.hpp"
#include "veloxquant/npy.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/tensor.hpp"
#include "veloxquant/text_model.hpp"
#include "veloxquant/threads.hpp"
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

// Text from the library (UTF-8) as a Python str; bytes that are not valid UTF-8 (a multi-byte
// character cut by the step limit) become U+FFFD.
py::str utf8_str(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

// A nlohmann::json value as Python objects (through the json module, so numbers keep the exact
// doubles the CLI writes).
py::object json_to_py(const nlohmann::json& j) {
  return py::module_::import("json").attr("loads")(j.dump());
}

// A model with its tokenizer. Immutable once open: calls release the GIL and may run in parallel.
class PyModel {
 public:
  PyModel(const std::string& path, const py::object& tokenizer, const py::object& load) {
    const std::string tok = tokenizer.is_none() ? std::string() : tokenizer.cast<std::string>();
    // None or "" as in C: the map; any other name but map / copy is a ValueError naming it
    const std::string how_name = load.is_none() ? std::string() : load.cast<std::string>();
    const vq::FileLoad how = how_name.empty() ? vq::FileLoad::Map : vq::parse_file_load(how_name);
    py::gil_scoped_release release;
    m_ = std::make_shared<const vq::TextModel>(vq::TextModel::open(path, tok, true, how));
  }
  const vq::TextModel& get() const { return *m_; }

  py::dict config() const {
    const vq::ModelConfig& c = m_->model.config();
    py::dict d;
    d["architecture"] = c.architecture;
    d["dim"] = c.dim;
    d["hidden_dim"] = c.hidden_dim;
    d["n_layers"] = c.n_layers;
    d["n_heads"] = c.n_heads;
    d["n_kv_heads"] = c.n_kv_heads;
    d["head_dim"] = c.head_dim();
    d["vocab_size"] = c.vocab_size;
    d["context_length"] = c.seq_len;
    d["bos_id"] = m_->tok->bos_id();
    d["eos_id"] = m_->tok->eos_id();
    d["tokenizer"] = m_->tok->description();
    d["model_path"] = m_->model_path;
    d["tokenizer_path"] = m_->tokenizer_path;
    return d;
  }

  std::vector<int32_t> tokenize(const std::string& text, const py::object& add_bos) const {
    const bool bos = add_bos.is_none() ? m_->tokenizer().add_bos_default() : add_bos.cast<bool>();
    py::gil_scoped_release release;
    return m_->tokenizer().encode(text, bos, false);
  }

  py::str detokenize(const std::vector<int32_t>& ids) const {
    std::string s;
    {
      py::gil_scoped_release release;
      m_->check_ids(ids, "detokenize");
      s = m_->tokenizer().decode(ids);
    }
    return utf8_str(s);
  }

  py::object generate(const py::object& prompt, const std::string& method, int64_t steps,
                      uint64_t seed, bool strict_view, bool return_tokens) const {
    if (steps < 0) throw py::value_error("generate: steps = " + std::to_string(steps) + " < 0");
    vq::GeneratedText g;
    std::vector<int32_t> ids;
    std::string text;
    const bool given_ids = !prompt.is_none() && !py::isinstance<py::str>(prompt);
    if (given_ids)
      ids = prompt.cast<std::vector<int32_t>>();
    else if (!prompt.is_none())
      text = prompt.cast<std::string>();
    {
      py::gil_scoped_release release;
      const vq::CacheConfig cfg = vq::CacheConfig::parse(method);
      if (!given_ids) ids = m_->encode_prompt(text);
      vq::EngineOptions eo;
      eo.seed = seed;
      eo.strict_view = strict_view;
      vq::GenerateOptions go;
      go.steps = steps;
      go.seed = seed;
      g = vq::generate_text(*m_, ids, cfg, eo, go);
    }
    py::str out = utf8_str(g.text);
    if (!return_tokens) return out;
    return py::make_tuple(out, py::cast(g.tokens));
  }

  py::object evaluate(const py::object& text, const py::object& ids_obj, const py::object& methods,
                      int64_t max_tokens, int64_t skip_tokens, int64_t prefill, uint64_t seed,
                      bool strict_view) const {
    if (text.is_none() == ids_obj.is_none())
      throw py::value_error("evaluate: pass exactly one of text= or ids=");
    std::vector<std::string> specs;
    if (py::isinstance<py::str>(methods))
      specs.push_back(methods.cast<std::string>());
    else
      specs = methods.cast<std::vector<std::string>>();
    if (specs.empty()) throw py::value_error("evaluate: methods names no method");
    if (max_tokens < 0 || skip_tokens < 0 || prefill < 0)
      throw py::value_error("evaluate: max_tokens, skip_tokens and prefill must be >= 0");
    const std::string source = text.is_none() ? "ids" : "text";
    std::vector<int32_t> ids;
    std::string t;
    if (!ids_obj.is_none()) ids = ids_obj.cast<std::vector<int32_t>>();
    if (!text.is_none()) t = text.cast<std::string>();
    nlohmann::json j;
    {
      py::gil_scoped_release release;
      if (source == "text") ids = m_->tokenizer().encode(t, false, false);
      m_->check_ids(ids, "evaluate: ids");
      const auto windows = vq::eval::eval_windows(ids, m_->model.config().seq_len, skip_tokens,
                                                  max_tokens, m_->bos(), source);
      vq::eval::FidelityOptions fo;
      fo.methods = specs;
      fo.run.prefill = prefill;
      fo.run.seed = seed;
      fo.run.strict_view = strict_view;
      const vq::eval::FidelityReport rep = vq::eval::run_fidelity(m_->model, windows, fo);
      nlohmann::json jm = nlohmann::json::array();
      for (const auto& r : rep.methods) jm.push_back(vq::eval::to_json(r));
      j = {{"windows", rep.n_windows},
           {"predicted_tokens", rep.predicted_tokens},
           {"reference", vq::eval::to_json(rep.reference)},
           {"methods", jm}};
    }
    return json_to_py(j);
  }

 private:
  std::shared_ptr<const vq::TextModel> m_;
};

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
      "set_threads", [](int n) { vq::set_thread_count(n); }, py::arg("n"),
      "Threads of the parallel loops (weight products, attention, the caches' per-head work, "
      "block codecs, evaluation windows), process-wide; default every core. Results are "
      "bit-identical for any count. ValueError outside [1, 1024].");
  m.def("get_threads", &vq::thread_count, "Threads the parallel loops use now.");
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

  py::class_<PyModel>(m, "Model",
                      "A model and its tokenizer: a .gguf file, a Hugging Face directory or a "
                      "llama2.c .bin (its tokNNN.bin found by vocabulary size, or tokenizer=).")
      .def(py::init<const std::string&, const py::object&, const py::object&>(), py::arg("path"),
           py::arg("tokenizer") = py::none(), py::arg("load") = "map",
           "load: how a .gguf / Hugging Face model's files come into memory, as the CLI's --load: "
           "'map' (a memory map) or 'copy' (read into memory on 2 MiB pages where the kernel "
           "allows; faster decode on large models).")
      .def_property_readonly("config", &PyModel::config,
                             "Architecture, shapes, context length, BOS/EOS ids, tokenizer.")
      .def("tokenize", &PyModel::tokenize, py::arg("text"), py::arg("add_bos") = py::none(),
           "Token ids of text (add_bos None = what the vocabulary asks for).")
      .def("detokenize", &PyModel::detokenize, py::arg("ids"), "Text of token ids.")
      .def("generate", &PyModel::generate, py::arg("prompt") = py::none(),
           py::arg("method") = "full", py::arg("steps") = 256, py::arg("seed") = 0,
           py::arg("strict_view") = false, py::arg("return_tokens") = false,
           "Greedy generation with every layer's KV cache following `method`; returns the text "
           "`veloxquant generate` prints (the prompt, then the new tokens; no final newline), or "
           "(text, new token ids) with return_tokens=True. prompt: a str, or a list of ids used "
           "as given (put the BOS in it), or None (BOS alone).")
      .def("evaluate", &PyModel::evaluate, py::arg("text") = py::none(),
           py::arg("ids") = py::none(), py::arg("methods") = "full", py::arg("max_tokens") = 0,
           py::arg("skip_tokens") = 0, py::arg("prefill") = 0, py::arg("seed") = 0,
           py::arg("strict_view") = false,
           "`veloxquant eval` (decode protocol) on text (encoded without BOS) or ids: windows of "
           "the context length each starting with BOS, every method against the full cache. "
           "Returns {windows, predicted_tokens, reference, methods}, each result with the fields "
           "of `veloxquant eval --json` (kl_mean, perplexity, top1_agreement, ...).")
      .def("__repr__",
           [](const PyModel& pm) { return "veloxquant.Model('" + pm.get().model_path + "')"; });

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

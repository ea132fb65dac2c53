// The C API (include/veloxquant/c_api.h): thin wrappers that turn every C++ exception into a
// status code and a thread-local message.
#include "veloxquant/c_api.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "eval/fidelity.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/mapped_file.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/tensor.hpp"
#include "veloxquant/text_model.hpp"
#include "veloxquant/threads.hpp"
#include "veloxquant/vqkv.hpp"

struct vq_cache {
  std::unique_ptr<vq::KVCache> cache;
  mutable vq::CacheStats snapshot;  // keeps extra-field names alive for vq_cache_stats_extra
  mutable bool have_snapshot = false;
};

struct vq_model {
  vq::TextModel m;
};

namespace {

thread_local std::string g_last_error;

void set_error(const char* msg) noexcept {
  try {
    g_last_error = msg;
  } catch (...) {
    g_last_error.clear();  // out of memory while copying the message: leave it empty
  }
}

template <typename Fn>
vq_status guarded(Fn&& fn) noexcept {
  try {
    fn();
    g_last_error.clear();
    return VQ_OK;
  } catch (const vq::InvalidArgument& e) {
    set_error(e.what());
    return VQ_ERR_INVALID_ARGUMENT;
  } catch (const vq::FormatError& e) {
    set_error(e.what());
    return VQ_ERR_FORMAT;
  } catch (const vq::IoError& e) {
    set_error(e.what());
    return VQ_ERR_IO;
  } catch (const vq::Error& e) {
    set_error(e.what());
    return VQ_ERR_STATE;
  } catch (const std::bad_alloc&) {
    set_error("out of memory");
    return VQ_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_error(e.what());
    return VQ_ERR_INTERNAL;
  } catch (...) {
    set_error("unknown C++ exception");
    return VQ_ERR_INTERNAL;
  }
}

void need(const void* p, const char* what) {
  VQ_CHECK(p != nullptr, vq::InvalidArgument, "NULL pointer passed for ", what);
}

// A malloc'd copy of `n` elements (NULL for none), for the caller to release with vq_free.
template <typename T>
T* malloc_copy(const T* src, size_t n, size_t extra = 0) {
  if (n + extra == 0) return nullptr;
  T* p = static_cast<T*>(std::malloc((n + extra) * sizeof(T)));
  if (!p) throw std::bad_alloc();
  if (n > 0) std::memcpy(p, src, n * sizeof(T));
  return p;
}

char* malloc_string(const std::string& s) {
  char* p = malloc_copy(s.data(), s.size(), 1);
  p[s.size()] = '\0';
  return p;
}

std::vector<int32_t> id_vector(const int32_t* ids, int64_t n, const char* what) {
  VQ_CHECK(n >= 0, vq::InvalidArgument, what, ": n = ", n, " is negative");
  if (n > 0) need(ids, what);
  return n > 0 ? std::vector<int32_t>(ids, ids + n) : std::vector<int32_t>();
}

vq::Tensor make_tensor(int dtype, const void* data, int64_t B, int64_t H, int64_t S, int64_t D,
                       const char* what) {
  VQ_CHECK(B >= 0 && H >= 0 && S >= 0, vq::InvalidArgument, what, ": shape [", B, ", ", H, ", ", S,
           ", ", D, "] has a negative dimension");
  vq::Tensor t(B, H, S, D);  // checks the element count
  const size_t n = static_cast<size_t>(t.numel());
  if (n == 0) return t;
  need(data, what);
  switch (dtype) {
    case VQ_F32:
      std::memcpy(t.data(), data, n * sizeof(float));
      break;
    case VQ_F16:
    case VQ_BF16: {
      const auto* h = static_cast<const uint16_t*>(data);
      for (size_t i = 0; i < n; ++i)
        t.data()[i] = dtype == VQ_F16 ? vq::fp16_to_fp32(h[i]) : vq::bf16_to_fp32(h[i]);
      break;
    }
    default:
      VQ_THROW(vq::InvalidArgument, what, ": unknown dtype code ", dtype,
               " (VQ_F32 = 1, VQ_F16 = 2, VQ_BF16 = 3)");
  }
  return t;
}

}  // namespace

extern "C" {

const char* vq_last_error(void) {
  return g_last_error.c_str();
}

const char* vq_status_name(vq_status s) {
  switch (s) {
    case VQ_OK:
      return "ok";
    case VQ_ERR_INVALID_ARGUMENT:
      return "invalid argument";
    case VQ_ERR_FORMAT:
      return "format error";
    case VQ_ERR_IO:
      return "i/o error";
    case VQ_ERR_STATE:
      return "invalid state";
    case VQ_ERR_OUT_OF_MEMORY:
      return "out of memory";
    case VQ_ERR_INTERNAL:
      return "internal error";
  }
  return "unknown status";
}

const char* vq_version(void) {
  return "0.1.0";
}

vq_status vq_set_threads(int n) {
  return guarded([&] { vq::set_thread_count(n); });
}

vq_status vq_get_threads(int* n) {
  return guarded([&] {
    need(n, "n");
    *n = vq::thread_count();
  });
}

vq_status vq_method_count(int64_t* count) {
  return guarded([&] {
    need(count, "count");
    *count = static_cast<int64_t>(vq::methods().size());
  });
}

vq_status vq_method_id(int64_t i, const char** id) {
  return guarded([&] {
    need(id, "id");
    const auto& ms = vq::methods();
    VQ_CHECK(i >= 0 && i < static_cast<int64_t>(ms.size()), vq::InvalidArgument, "method index ", i,
             " is outside [0, ", ms.size(), ")");
    *id = ms[static_cast<size_t>(i)].id.c_str();
  });
}

vq_status vq_cache_create_layer(const char* spec, int64_t head_dim, int64_t layer, int64_t n_layers,
                                uint64_t seed, vq_cache** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    need(spec, "spec");
    auto c = std::make_unique<vq_cache>();
    c->cache = vq::make_cache(vq::CacheConfig::parse(spec), head_dim, layer, n_layers,
                              vq::layer_seed(seed, layer));
    *out = c.release();
  });
}

vq_status vq_cache_create(const char* spec, int64_t head_dim, vq_cache** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    need(spec, "spec");
    auto c = std::make_unique<vq_cache>();
    c->cache = vq::make_cache(vq::CacheConfig::parse(spec), head_dim);
    *out = c.release();
  });
}

void vq_cache_destroy(vq_cache* cache) {
  delete cache;
}

vq_status vq_cache_update_typed(vq_cache* cache, int dtype, const void* keys, const void* values,
                                const void* queries, int64_t B, int64_t H, int64_t S, int64_t Hq) {
  return guarded([&] {
    need(cache, "cache");
    const int64_t D = cache->cache->head_dim();
    const vq::Tensor k = make_tensor(dtype, keys, B, H, S, D, "keys");
    const vq::Tensor v = make_tensor(dtype, values, B, H, S, D, "values");
    cache->have_snapshot = false;
    if (queries == nullptr) {
      VQ_CHECK(Hq == 0, vq::InvalidArgument, "queries is NULL but Hq = ", Hq, " (pass 0)");
      cache->cache->update(k, v);
    } else {
      const vq::Tensor q = make_tensor(dtype, queries, B, Hq, S, D, "queries");
      cache->cache->update(k, v, &q);
    }
  });
}

vq_status vq_cache_update(vq_cache* cache, const float* keys, const float* values,
                          const float* queries, int64_t B, int64_t H, int64_t S, int64_t Hq) {
  return vq_cache_update_typed(cache, VQ_F32, keys, values, queries, B, H, S, Hq);
}

vq_status vq_cache_shape(const vq_cache* cache, int64_t* B, int64_t* H, int64_t* D,
                         int64_t* offset) {
  return guarded([&] {
    need(cache, "cache");
    if (B) *B = cache->cache->batch();
    if (H) *H = cache->cache->kv_heads();
    if (D) *D = cache->cache->head_dim();
    if (offset) *offset = cache->cache->offset();
  });
}

vq_status vq_cache_kept_tokens(const vq_cache* cache, int64_t* n_kept) {
  return guarded([&] {
    need(cache, "cache");
    need(n_kept, "n_kept");
    const vq::KVCache& c = *cache->cache;
    const int64_t n = c.kept(0, 0);
    for (int64_t b = 0; b < c.batch(); ++b)
      for (int64_t h = 0; h < c.kv_heads(); ++h)
        VQ_CHECK(c.kept(b, h) == n, vq::Error, c.config().method(),
                 ": heads keep different token counts (", n, " and ", c.kept(b, h), ")");
    *n_kept = n;
  });
}

vq_status vq_cache_fetch(const vq_cache* cache, float* keys, float* values, int64_t* positions,
                         int64_t capacity_tokens, int64_t* n_kept) {
  return guarded([&] {
    need(cache, "cache");
    const vq::FetchResult r = cache->cache->fetch();
    VQ_CHECK(capacity_tokens >= r.n_kept, vq::InvalidArgument, "buffers sized for ",
             capacity_tokens, " tokens per head but the cache keeps ", r.n_kept);
    if (n_kept) *n_kept = r.n_kept;
    if (keys && r.keys.numel() > 0)
      std::memcpy(keys, r.keys.data(), sizeof(float) * static_cast<size_t>(r.keys.numel()));
    if (values && r.values.numel() > 0)
      std::memcpy(values, r.values.data(), sizeof(float) * static_cast<size_t>(r.values.numel()));
    if (positions && !r.positions.empty())
      std::memcpy(positions, r.positions.data(), sizeof(int64_t) * r.positions.size());
  });
}

vq_status vq_cache_get_stats(const vq_cache* cache, vq_cache_stats* out) {
  return guarded([&] {
    need(cache, "cache");
    need(out, "out");
    cache->snapshot = cache->cache->stats();
    cache->have_snapshot = true;
    const vq::CacheStats& s = cache->snapshot;
    out->tokens_seen = s.tokens_seen;
    out->tokens_kept = s.tokens_kept;
    out->kept_bytes = s.kept_bytes;
    out->full_seq_bytes = s.full_seq_bytes;
    out->compression_ratio = s.compression_ratio;
    out->n_extra = static_cast<int64_t>(s.extra.size());
  });
}

vq_status vq_cache_stats_extra(const vq_cache* cache, int64_t i, const char** name, double* value) {
  return guarded([&] {
    need(cache, "cache");
    if (!cache->have_snapshot) {
      cache->snapshot = cache->cache->stats();
      cache->have_snapshot = true;
    }
    const auto& extra = cache->snapshot.extra;
    VQ_CHECK(i >= 0 && i < static_cast<int64_t>(extra.size()), vq::InvalidArgument,
             "stats field index ", i, " is outside [0, ", extra.size(), ")");
    if (name) *name = extra[static_cast<size_t>(i)].first.c_str();
    if (value) *value = extra[static_cast<size_t>(i)].second;
  });
}

vq_status vq_compress(const float* data, const int64_t* shape, int ndim, const char* spec,
                      uint8_t** out, size_t* out_size) {
  return guarded([&] {
    need(out, "out");
    need(out_size, "out_size");
    *out = nullptr;
    *out_size = 0;
    need(spec, "spec");
    VQ_CHECK(ndim >= 2 && ndim <= 5, vq::InvalidArgument, "ndim = ", ndim,
             " is not 2 ([S, D]) to 5 ([L, 2, H, S, D])");
    need(shape, "shape");
    const std::vector<int64_t> dims(shape, shape + ndim);
    const std::vector<uint8_t> file =
        vq::vqkv_compress(data, dims, vq::CacheConfig::parse(spec), vq::NpyDtype::Float32);
    auto* buf = static_cast<uint8_t*>(std::malloc(file.empty() ? 1 : file.size()));
    if (buf == nullptr) throw std::bad_alloc();
    std::memcpy(buf, file.data(), file.size());
    *out = buf;
    *out_size = file.size();
  });
}

vq_status vq_decompress(const uint8_t* data, size_t size, float** values, int64_t shape[5],
                        int* ndim) {
  return guarded([&] {
    need(values, "values");
    *values = nullptr;
    need(shape, "shape");
    need(ndim, "ndim");
    need(data, "data");
    const vq::VqkvArray a = vq::vqkv_decompress(data, size);
    auto* buf = static_cast<float*>(std::malloc(a.values.empty() ? 1 : a.values.size() * 4));
    if (buf == nullptr) throw std::bad_alloc();
    if (!a.values.empty()) std::memcpy(buf, a.values.data(), a.values.size() * sizeof(float));
    *values = buf;
    *ndim = static_cast<int>(a.shape.size());
    for (size_t i = 0; i < 5; ++i) shape[i] = i < a.shape.size() ? a.shape[i] : 0;
  });
}

vq_status vq_model_open(const char* path, const char* tokenizer, vq_model** out) {
  return vq_model_open_ex(path, tokenizer, nullptr, out);
}

vq_status vq_model_open_ex(const char* path, const char* tokenizer, const char* load,
                           vq_model** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    need(path, "path");
    const vq::FileLoad how =
        load && *load ? vq::parse_file_load(load) : vq::FileLoad::Map;  // names a bad value
    auto m = std::make_unique<vq_model>();
    m->m = vq::TextModel::open(path, tokenizer ? tokenizer : "", true, how);
    *out = m.release();
  });
}

void vq_model_destroy(vq_model* model) {
  delete model;
}

vq_status vq_model_get_info(const vq_model* model, vq_model_info* out) {
  return guarded([&] {
    need(model, "model");
    need(out, "out");
    const vq::ModelConfig& c = model->m.model.config();
    const vq::TextTokenizer& t = model->m.tokenizer();
    *out = vq_model_info{c.vocab_size,
                         c.dim,
                         c.hidden_dim,
                         c.n_layers,
                         c.n_heads,
                         c.n_kv_heads,
                         c.head_dim(),
                         c.seq_len,
                         t.bos_id(),
                         t.eos_id(),
                         t.add_bos_default() ? 1 : 0};
  });
}

vq_status vq_model_tokenize(const vq_model* model, const char* text, size_t size, int add_bos,
                            int32_t* ids, int64_t capacity, int64_t* n_ids) {
  return guarded([&] {
    need(model, "model");
    need(n_ids, "n_ids");
    if (size > 0) need(text, "text");
    VQ_CHECK(capacity >= 0, vq::InvalidArgument, "capacity = ", capacity, " is negative");
    const std::vector<int32_t> v = model->m.tokenizer().encode(
        std::string_view(size > 0 ? text : "", size), add_bos != 0, false);
    const int64_t n = static_cast<int64_t>(v.size());
    *n_ids = n;
    VQ_CHECK(n <= capacity, vq::InvalidArgument, "the text encodes to ", n,
             " ids, more than capacity = ", capacity, " (call again with capacity >= ", n, ")");
    if (n > 0) {
      need(ids, "ids");
      std::memcpy(ids, v.data(), v.size() * sizeof(int32_t));
    }
  });
}

vq_status vq_model_detokenize(const vq_model* model, const int32_t* ids, int64_t n, char** text,
                              size_t* size) {
  return guarded([&] {
    need(model, "model");
    need(text, "text");
    *text = nullptr;
    const std::vector<int32_t> v = id_vector(ids, n, "ids");
    model->m.check_ids(v, "ids");
    const std::string s = model->m.tokenizer().decode(v);
    *text = malloc_string(s);
    if (size) *size = s.size();
  });
}

vq_status vq_model_generate(const vq_model* model, const char* prompt, const char* cache_spec,
                            int64_t steps, uint64_t seed, char** text, int32_t** tokens,
                            int64_t* n_tokens) {
  return guarded([&] {
    need(model, "model");
    need(text, "text");
    *text = nullptr;
    if (tokens) *tokens = nullptr;
    if (n_tokens) *n_tokens = 0;
    VQ_CHECK(steps >= 0, vq::InvalidArgument, "steps = ", steps, " is negative");
    const vq::CacheConfig cfg = vq::CacheConfig::parse(cache_spec ? cache_spec : "full");
    const std::vector<int32_t> p = model->m.encode_prompt(prompt ? prompt : "");
    vq::EngineOptions eo;
    eo.seed = seed;
    vq::GenerateOptions go;
    go.steps = steps;
    go.seed = seed;
    const vq::GeneratedText g = vq::generate_text(model->m, p, cfg, eo, go);
    char* t = malloc_string(g.text);
    int32_t* ids = nullptr;
    if (tokens) {
      try {
        ids = malloc_copy(g.tokens.data(), g.tokens.size());
      } catch (...) {
        std::free(t);
        throw;
      }
      *tokens = ids;
    }
    *text = t;
    if (n_tokens) *n_tokens = static_cast<int64_t>(g.tokens.size());
  });
}

vq_status vq_model_evaluate(const vq_model* model, const int32_t* ids, int64_t n,
                            const char* cache_spec, int64_t max_tokens, int64_t prefill,
                            uint64_t seed, vq_eval_result* out) {
  return guarded([&] {
    need(model, "model");
    need(cache_spec, "cache_spec");
    need(out, "out");
    VQ_CHECK(max_tokens >= 0, vq::InvalidArgument, "max_tokens = ", max_tokens, " is negative");
    VQ_CHECK(prefill >= 0, vq::InvalidArgument, "prefill = ", prefill, " is negative");
    const std::vector<int32_t> v = id_vector(ids, n, "ids");
    model->m.check_ids(v, "ids");
    const auto windows = vq::eval::eval_windows(v, model->m.model.config().seq_len, 0, max_tokens,
                                                model->m.bos(), "ids");
    vq::eval::FidelityOptions fo;
    fo.methods = {cache_spec};
    fo.run.prefill = prefill;
    fo.run.seed = seed;
    const vq::eval::FidelityReport rep = vq::eval::run_fidelity(model->m.model, windows, fo);
    const vq::eval::MethodResult& r = rep.methods.at(0);
    *out = vq_eval_result{
        rep.n_windows, rep.predicted_tokens, r.perplexity,      rep.reference.perplexity, r.kl_mean,
        r.kl_max,      r.top1_agreement,     r.bytes_per_token, r.compression_ratio};
  });
}

void vq_free(void* p) {
  std::free(p);
}

}  // extern "C"

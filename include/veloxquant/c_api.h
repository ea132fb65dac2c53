/* VeloxQuant C API: KV caches, the .vqkv codec and models for C, Rust, Go, ... callers.
 *
 * Every function returns a vq_status; VQ_OK (0) is success. On failure, vq_last_error() returns a
 * readable message for the calling thread (valid until that thread's next VeloxQuant call). No C++
 * exception ever crosses this interface. Arrays are row-major; tensors are [B, H, S, D] (batch,
 * KV heads, tokens, head_dim).
 *
 *   vq_cache* c = NULL;
 *   if (vq_cache_create("curdkv:budget=64", 64, &c) != VQ_OK) puts(vq_last_error());
 *   vq_cache_update(c, keys, values, NULL, B, H, S, 0);
 *   int64_t n; vq_cache_kept_tokens(c, &n);           // then size the buffers for vq_cache_fetch
 *   vq_cache_destroy(c);
 */
#ifndef VELOXQUANT_C_API_H
#define VELOXQUANT_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. Values are stable and never reused. */
typedef enum vq_status {
  VQ_OK = 0,
  VQ_ERR_INVALID_ARGUMENT = 1, /* bad spec, shape, NULL pointer, too-small buffer, NaN/Inf */
  VQ_ERR_FORMAT = 2,           /* malformed .vqkv (or other stored) bytes */
  VQ_ERR_IO = 3,               /* a file could not be read or written */
  VQ_ERR_STATE = 4,            /* the call does not fit the object's state (e.g. ragged heads) */
  VQ_ERR_OUT_OF_MEMORY = 5,
  VQ_ERR_INTERNAL = 6 /* a bug: please report the message */
} vq_status;

/* Element types of caller buffers. Same values as the .vqkv source-dtype codes. */
typedef enum vq_dtype { VQ_F32 = 1, VQ_F16 = 2, VQ_BF16 = 3 } vq_dtype;

/* Message of the last failed call on this thread ("" after a success). Never NULL. */
const char* vq_last_error(void);
/* A short name for a status code ("ok", "invalid argument", ...). */
const char* vq_status_name(vq_status s);
/* "0.1.0" */
const char* vq_version(void);

/* Threads of the parallel loops (weight products, attention, the caches' per-head work, block
 * codecs), process-wide; the default is every core. Results are bit-identical for any count.
 * vq_set_threads refuses n outside [1, 1024]. */
vq_status vq_set_threads(int n);
vq_status vq_get_threads(int* n);

/* Number of registered methods, and the id of method i (0-based; pointer valid forever). */
vq_status vq_method_count(int64_t* count);
vq_status vq_method_id(int64_t i, const char** id);

/* ---- caches ------------------------------------------------------------------------------ */

typedef struct vq_cache vq_cache;

/* Build one layer's cache from a spec such as "curdkv:budget=64" or "kvtc:bit_budget=128". */
vq_status vq_cache_create(const char* spec, int64_t head_dim, vq_cache** out);
/* Same with the layer's place in the model and the model seed (per-layer seeds are derived). */
vq_status vq_cache_create_layer(const char* spec, int64_t head_dim, int64_t layer, int64_t n_layers,
                                uint64_t seed, vq_cache** out);
/* Free a cache (NULL is fine). */
void vq_cache_destroy(vq_cache* cache);

/* Append S new tokens: keys, values fp32 [B, H, S, head_dim]; queries NULL or fp32
 * [B, Hq, S, head_dim] with Hq a positive multiple of H (pass Hq = 0 when queries is NULL).
 * B and H must stay the same across calls. */
vq_status vq_cache_update(vq_cache* cache, const float* keys, const float* values,
                          const float* queries, int64_t B, int64_t H, int64_t S, int64_t Hq);
/* Same for 16-bit inputs: dtype is a vq_dtype value (VQ_F16 or VQ_BF16 bit patterns, or VQ_F32
 * as float*), passed as int so that any value a caller sends is well defined (others are refused).
 */
vq_status vq_cache_update_typed(vq_cache* cache, int dtype, const void* keys, const void* values,
                                const void* queries, int64_t B, int64_t H, int64_t S, int64_t Hq);

/* Shape so far: batch B, KV heads H (0 before the first update), head_dim D, positions seen. */
vq_status vq_cache_shape(const vq_cache* cache, int64_t* B, int64_t* H, int64_t* D,
                         int64_t* offset);
/* Tokens kept per head (the same for every head; VQ_ERR_STATE if a method keeps ragged heads). */
vq_status vq_cache_kept_tokens(const vq_cache* cache, int64_t* n_kept);
/* Copy what is kept, sorted by position: keys/values [B, H, n_kept, D] fp32 and positions
 * [B, H, n_kept] int64 (any of the three may be NULL to skip it). capacity_tokens is the n the
 * buffers were sized for; VQ_ERR_INVALID_ARGUMENT if it is below n_kept. *n_kept (may be NULL)
 * receives the count written. */
vq_status vq_cache_fetch(const vq_cache* cache, float* keys, float* values, int64_t* positions,
                         int64_t capacity_tokens, int64_t* n_kept);

/* Byte accounting (fp16 K + V baseline). */
typedef struct vq_cache_stats {
  int64_t tokens_seen;
  int64_t tokens_kept;
  double kept_bytes;
  double full_seq_bytes;
  double compression_ratio;
  int64_t n_extra; /* method-specific fields, read with vq_cache_stats_extra */
} vq_cache_stats;
vq_status vq_cache_get_stats(const vq_cache* cache, vq_cache_stats* out);
/* Method-specific field i (0 <= i < n_extra): name (valid until the cache's next update) and value.
 */
vq_status vq_cache_stats_extra(const vq_cache* cache, int64_t i, const char** name, double* value);

/* ---- .vqkv compression --------------------------------------------------------------------- */

/* Compress fp32 data of shape [S, D], [H, S, D], [L, H, S, D] or [L, 2, H, S, D] (ndim 2..5) with
 * a transform method. On success *out is a malloc'd buffer of *out_size bytes holding a .vqkv file
 * (free it with vq_free). The same input gives the same bytes as `veloxquant compress`. */
vq_status vq_compress(const float* data, const int64_t* shape, int ndim, const char* spec,
                      uint8_t** out, size_t* out_size);
/* Decode .vqkv bytes. *values is a malloc'd fp32 buffer (free with vq_free), shape receives up to
 * 5 dimensions and *ndim their count. Damaged or truncated input gives VQ_ERR_FORMAT. */
vq_status vq_decompress(const uint8_t* data, size_t size, float** values, int64_t shape[5],
                        int* ndim);
/* Free a buffer returned by vq_compress / vq_decompress (NULL is fine). */
void vq_free(void* p);

/* ---- models ------------------------------------------------------------------------------ */

/* A model with its tokenizer: a .gguf file, a Hugging Face directory (config.json +
 * *.safetensors + tokenizer.json / tokenizer.model) or a llama2.c checkpoint .bin. Immutable once
 * open: every call below may run on one model from several threads at once.
 *
 *   vq_model* m = NULL;
 *   if (vq_model_open("stories260K.gguf", NULL, &m) != VQ_OK) puts(vq_last_error());
 *   char* text = NULL;
 *   vq_model_generate(m, "Once upon a time", "snapkv:budget=64+q8_0", 32, 0, &text, NULL, NULL);
 *   puts(text); vq_free(text); vq_model_destroy(m);
 */
typedef struct vq_model vq_model;

/* Open a model. tokenizer: NULL or "" = the vocabulary inside the .gguf / directory, or for a
 * .bin the tokNNN.bin matching its vocabulary size (searched in $VQ_MODELS_DIR and
 * ../shared/models); otherwise a tokenizer.bin, .gguf, tokenizer.model, tokenizer.json or a
 * directory. Missing files: VQ_ERR_IO; malformed ones: VQ_ERR_FORMAT. */
vq_status vq_model_open(const char* path, const char* tokenizer, vq_model** out);
/* vq_model_open with the way a .gguf / Hugging Face model's files come into memory, as the CLI's
 * --load: NULL, "" or "map" maps them (instant, shared with the page cache); "copy" reads them
 * into the process's memory on 2 MiB pages where the kernel allows (faster decode on large
 * models). A copy larger than the machine's physical memory (or $VQ_MEMORY_LIMIT) is refused
 * with VQ_ERR_INVALID_ARGUMENT before anything is read; one that passes that check but cannot be
 * allocated or read gives VQ_ERR_IO. Any other load value: VQ_ERR_INVALID_ARGUMENT naming it.
 * *out is NULL after any failure. A llama2.c .bin is always read. */
vq_status vq_model_open_ex(const char* path, const char* tokenizer, const char* load,
                           vq_model** out);
/* Free a model (NULL is fine). */
void vq_model_destroy(vq_model* model);

typedef struct vq_model_info {
  int64_t vocab_size, dim, hidden_dim, n_layers, n_heads, n_kv_heads, head_dim;
  int64_t context_length; /* seq_len: the most positions one sequence may take */
  int32_t bos_id, eos_id; /* -1 when the vocabulary has none */
  int32_t add_bos;        /* 1 when the vocabulary asks for BOS before a text */
} vq_model_info;
vq_status vq_model_get_info(const vq_model* model, vq_model_info* out);

/* Token ids of text[0:size] (UTF-8), with the BOS first when add_bos is non-zero. Writes at most
 * capacity ids to ids (may be NULL when capacity is 0); *n_ids receives the full count, so a call
 * with capacity 0 sizes the buffer. VQ_ERR_INVALID_ARGUMENT when capacity is smaller than that
 * count (nothing useful is written then). */
vq_status vq_model_tokenize(const vq_model* model, const char* text, size_t size, int add_bos,
                            int32_t* ids, int64_t capacity, int64_t* n_ids);
/* The text of ids[0:n] as the vocabulary decodes it. *text is a malloc'd NUL-terminated string
 * (free with vq_free); *size (may be NULL) receives its length without the NUL. */
vq_status vq_model_detokenize(const vq_model* model, const int32_t* ids, int64_t n, char** text,
                              size_t* size);

/* Greedy generation, as `veloxquant generate --prompt P --method SPEC --steps N --seed S`: the
 * prompt is encoded with the BOS the vocabulary asks for, every layer's KV cache follows
 * cache_spec (NULL = "full"), generation stops after `steps` tokens, at a BOS / EOS or at the
 * context length. *text (malloc'd, free with vq_free) receives the text the CLI prints without
 * its final newline: the prompt, then the new tokens. tokens (may be NULL) receives a malloc'd
 * array of the *n_tokens new token ids (free with vq_free; NULL when there are none). */
vq_status vq_model_generate(const vq_model* model, const char* prompt, const char* cache_spec,
                            int64_t steps, uint64_t seed, char** text, int32_t** tokens,
                            int64_t* n_tokens);

/* Scores of one cache spec over a token sequence, as `veloxquant eval` computes them. */
typedef struct vq_eval_result {
  int64_t windows;          /* windows of the context length the tokens were cut into */
  int64_t predicted_tokens; /* next-token predictions scored */
  double perplexity;        /* of the method */
  double full_perplexity;   /* of the uncompressed cache over the same windows */
  double kl_mean;           /* mean KL(full || method), nats */
  double kl_max;
  double top1_agreement;    /* fraction of positions whose argmax equals full's */
  double bytes_per_token;   /* bytes held per token per layer-head, averaged over positions */
  double compression_ratio; /* fp16 bytes per token / bytes_per_token */
} vq_eval_result;

/* Run ids[0:n] (text tokens without BOS; the model's BOS starts every window) through the full
 * cache and through cache_spec, and score the method: the windows, KL, top-1 and perplexity of
 * `veloxquant eval --text-ids FILE --methods SPEC --max-tokens max_tokens --prefill prefill
 * --seed seed` (max_tokens 0 = all ids). An id outside the vocabulary: VQ_ERR_INVALID_ARGUMENT. */
vq_status vq_model_evaluate(const vq_model* model, const int32_t* ids, int64_t n,
                            const char* cache_spec, int64_t max_tokens, int64_t prefill,
                            uint64_t seed, vq_eval_result* out);

#ifdef __cplusplus
}
#endif

#endif /* VELOXQUANT_C_API_H */

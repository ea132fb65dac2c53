/* VeloxQuant C API: KV caches and the .vqkv codec for C, Rust, Go, ... callers.
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

#ifdef __cplusplus
}
#endif

#endif /* VELOXQUANT_C_API_H */

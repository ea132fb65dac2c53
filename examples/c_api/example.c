/* Uses the VeloxQuant C API: an eviction cache fed token by token, its kept positions and byte
 * accounting, then a .vqkv compress/decompress round trip and the error path; with a model path
 * argument (`c_api_example stories260K.gguf`) also a model: tokens, generation, evaluation. Exits
 * non-zero when any result is not what the API promises, so it doubles as a test. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "veloxquant/c_api.h"

#define CHECK(call)                                                                        \
  do {                                                                                     \
    vq_status st_ = (call);                                                                \
    if (st_ != VQ_OK) {                                                                    \
      fprintf(stderr, "%s failed: %s: %s\n", #call, vq_status_name(st_), vq_last_error()); \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

/* Deterministic pseudo-normal values (sum of uniforms from a 64-bit LCG). */
static float next_value(unsigned long long* s) {
  float acc = 0.0f;
  for (int i = 0; i < 4; ++i) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    acc += (float)((*s >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
  }
  return acc;
}

/* True when a[0:n] is b[0:n] rounded to fp16 (within half an fp16 step, 2^-11 relative). */
static int same_at_fp16(const float* a, const float* b, int n) {
  for (int i = 0; i < n; ++i) {
    const float d = a[i] - b[i], m = b[i] < 0 ? -b[i] : b[i];
    if ((d < 0 ? -d : d) > m * (1.0f / 2048.0f) + 1e-7f) return 0;
  }
  return 1;
}

/* A model given on the command line (a .gguf, a Hugging Face directory or a llama2.c .bin with
 * its tokenizer found next to it): its shapes, a prompt's tokens, greedy text with a compressed
 * cache, and that cache's fidelity against the full one on the generated tokens. */
static int run_model(const char* path) {
  vq_model* m = NULL;
  vq_model_info info;
  const char* prompt = "Once upon a time";
  int64_t n = 0, n_new = 0;
  int32_t ids[64];
  char* text = NULL;
  int32_t* gen = NULL;
  vq_eval_result r;
  CHECK(vq_model_open(path, NULL, &m));
  CHECK(vq_model_get_info(m, &info));
  printf("model %s: %lld layers, %lld/%lld heads, head_dim %lld, vocab %lld, context %lld\n", path,
         (long long)info.n_layers, (long long)info.n_heads, (long long)info.n_kv_heads,
         (long long)info.head_dim, (long long)info.vocab_size, (long long)info.context_length);
  CHECK(vq_model_tokenize(m, prompt, strlen(prompt), 1, ids, 64, &n));
  printf("'%s' -> %lld tokens, first %d\n", prompt, (long long)n, (int)ids[0]);
  CHECK(vq_model_generate(m, prompt, "snapkv:budget=64+q8_0:block=8", 48, 0, &text, &gen, &n_new));
  printf("snapkv:budget=64+q8_0:block=8 generates %lld tokens: %s\n", (long long)n_new, text);
  if (strncmp(text, prompt, strlen(prompt)) != 0 || n_new <= 0) return 1;
  CHECK(vq_model_evaluate(m, gen, n_new, "snapkv:budget=16+q8_0:block=8", 0, 0, 0, &r));
  printf("on them: perplexity %.4f (full %.4f), KL %.6f, top-1 %.3f, %.2fx fp16\n", r.perplexity,
         r.full_perplexity, r.kl_mean, r.top1_agreement, r.compression_ratio);
  if (r.predicted_tokens != n_new || !(r.kl_mean >= 0.0)) return 1;
  vq_free(text);
  vq_free(gen);
  vq_model_destroy(m);
  if (vq_model_open("/nonexistent/model.gguf", NULL, &m) != VQ_ERR_IO || m != NULL) return 1;
  printf("missing model: %s\n", vq_last_error());
  return 0;
}

int main(int argc, char** argv) {
  enum { B = 1, H = 2, S = 48, D = 16, BUDGET = 12 };
  unsigned long long seed = 42;
  static float keys[B * H * S * D], values[B * H * S * D];
  for (int i = 0; i < B * H * S * D; ++i) {
    keys[i] = next_value(&seed);
    values[i] = next_value(&seed);
  }
  printf("veloxquant %s\n", vq_version());

  /* 1. An eviction cache, one token per update. Token t of head h lives at (h * S + t) * D. */
  vq_cache* cache = NULL;
  CHECK(vq_cache_create("curdkv:budget=12,n_sink=2", D, &cache));
  float k_tok[H * D], v_tok[H * D];
  for (int t = 0; t < S; ++t) {
    for (int h = 0; h < H; ++h) {
      memcpy(k_tok + h * D, keys + (h * S + t) * D, sizeof(float) * D);
      memcpy(v_tok + h * D, values + (h * S + t) * D, sizeof(float) * D);
    }
    CHECK(vq_cache_update(cache, k_tok, v_tok, NULL, B, H, 1, 0));
  }
  int64_t n_kept = 0;
  CHECK(vq_cache_kept_tokens(cache, &n_kept));
  float* kk = malloc(sizeof(float) * B * H * n_kept * D);
  int64_t* pos = malloc(sizeof(int64_t) * B * H * n_kept);
  CHECK(vq_cache_fetch(cache, kk, NULL, pos, n_kept, &n_kept));
  printf("kept %lld of %d tokens per head; head 0 positions:", (long long)n_kept, S);
  for (int64_t i = 0; i < n_kept; ++i) printf(" %lld", (long long)pos[i]);
  printf("\n");
  if (n_kept != BUDGET || pos[0] != 0 || pos[1] != 1) {
    fprintf(stderr, "unexpected kept set (budget %d, sinks 0 and 1)\n", BUDGET);
    return 1;
  }
  for (int64_t i = 0; i < n_kept; ++i) /* fetched rows: the input rows at those positions, as */
    if (!same_at_fp16(kk + i * D, keys + pos[i] * D, D)) { /* the cache stores them (fp16) */
      fprintf(stderr, "fetched key row %lld differs from the input\n", (long long)i);
      return 1;
    }
  vq_cache_stats st;
  CHECK(vq_cache_get_stats(cache, &st));
  printf("kept_bytes %.0f, full_seq_bytes %.0f, compression ratio %.2f, %lld extra fields\n",
         st.kept_bytes, st.full_seq_bytes, st.compression_ratio, (long long)st.n_extra);
  for (int64_t i = 0; i < st.n_extra; ++i) {
    const char* name;
    double value;
    CHECK(vq_cache_stats_extra(cache, i, &name, &value));
    printf("  %s = %g\n", name, value);
  }
  /* Too-small buffers are refused with a message, not overrun. */
  if (vq_cache_fetch(cache, kk, NULL, NULL, n_kept - 1, NULL) != VQ_ERR_INVALID_ARGUMENT) {
    fprintf(stderr, "a too-small buffer was accepted\n");
    return 1;
  }
  printf("small buffer refused: %s\n", vq_last_error());
  free(kk);
  free(pos);
  vq_cache_destroy(cache);

  /* 2. Compress [H, S, D] keys to .vqkv bytes and back. */
  const int64_t shape[3] = {H, S, D};
  uint8_t* blob = NULL;
  size_t blob_size = 0;
  CHECK(vq_compress(keys, shape, 3, "q8_0:block=16", &blob, &blob_size));
  float* back = NULL;
  int64_t back_shape[5];
  int ndim = 0;
  CHECK(vq_decompress(blob, blob_size, &back, back_shape, &ndim));
  double se = 0, ss = 0;
  for (int i = 0; i < H * S * D; ++i) {
    se += (back[i] - keys[i]) * (double)(back[i] - keys[i]);
    ss += keys[i] * (double)keys[i];
  }
  printf("q8_0: %zu bytes (fp16 %d), shape [%lld, %lld, %lld], relative RMSE %.5f\n", blob_size,
         H * S * D * 2, (long long)back_shape[0], (long long)back_shape[1],
         (long long)back_shape[2], sqrt(se / ss));
  if (ndim != 3 || back_shape[1] != S || sqrt(se / ss) > 0.02) return 1;
  vq_free(back);

  /* 3. Errors: a damaged file and an unknown method give codes and messages. */
  blob[blob_size / 2] ^= 0x20;
  vq_status s = vq_decompress(blob, blob_size, &back, back_shape, &ndim);
  printf("damaged file: %s: %s\n", vq_status_name(s), vq_last_error());
  if (s != VQ_ERR_FORMAT || back != NULL) return 1;
  vq_free(blob);
  s = vq_cache_create("no_such_method", D, &cache);
  printf("bad spec: %s: %s\n", vq_status_name(s), vq_last_error());
  if (s != VQ_ERR_INVALID_ARGUMENT || cache != NULL || strlen(vq_last_error()) == 0) return 1;
  if (argc > 1 && run_model(argv[1]) != 0) return 1;
  printf("ok\n");
  return 0;
}

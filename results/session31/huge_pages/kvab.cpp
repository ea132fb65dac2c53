// Session 31: the store kernels' requests ahead (kRowPrefetchAhead), off against on in one
// process: a random 1B-shaped Q8_0 model, `full` prefilled to `ctx` tokens, rounds of 8 decode
// steps alternating the distance between 0 and `pf` bytes. It needs a trial build of
// src/store/row_kernels.cpp where the distance is a global (vq::store::g_kv_pf) instead of a
// constant; the landed code has the constant. Build:
//   g++ -O3 -march=native -std=c++20 -I include -I src results/session31/huge_pages/kvab.cpp
//       build/lib/libveloxquant.a -lzstd -lxxhash -lsentencepiece -lpcre2-8 -licuuc -lpthread -o
//       kvab
//   ./kvab 4096 10 4096     (context, rounds, bytes ahead)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include "veloxquant/model.hpp"
#include "veloxquant/threads.hpp"
namespace vq::store {
extern int64_t g_kv_pf;
}
using namespace vq;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char** argv) {
  int ctx = argc > 1 ? atoi(argv[1]) : 4096;
  int rounds = argc > 2 ? atoi(argv[2]) : 10;
  int64_t pf = argc > 3 ? atol(argv[3]) : 4096;
  set_thread_count(2);
  ModelConfig c;
  c.dim = 2048;
  c.n_layers = 16;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.hidden_dim = 8192;
  c.vocab_size = 32000;
  c.seq_len = ctx + 4096;
  Model m = Model::random_typed(c, GgmlType::Q8_0, 1);
  Engine e(m, std::string("full"));
  std::vector<int32_t> toks(ctx);
  for (int i = 0; i < ctx; i++) toks[i] = (i * 7919) % 32000;
  e.prefill(toks, false);
  int32_t t = 1;
  e.step(t);
  double ta = 0, tb = 0;
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < 2; k++) {
      bool A = (r % 2 == 0) == (k == 0);
      vq::store::g_kv_pf = A ? 0 : pf;
      double t0 = now();
      for (int s = 0; s < 8; s++) t = e.step(t)[0] > 0 ? 5 : 9;
      double d = now() - t0;
      if (A)
        ta += d;
      else
        tb += d;
      printf(" %s%.1f", A ? "off " : "on ", 8 / d);
    }
  printf("\nctx %d: prefetch off %.1f tok/s, on (%ld B) %.1f tok/s, ratio %.3f\n", ctx,
         8 * rounds / ta, (long)pf, 8 * rounds / tb, ta / tb);
}

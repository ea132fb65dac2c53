// Session 32: a decode loop on the random 1B-shaped model, for profiling (perf) one step's parts.
// Build (after the project's build):
//   g++ -O3 -march=native -std=c++20 -I include -I src results/session32/decode_loop.cpp
//       build/lib/libveloxquant.a -lzstd -lxxhash -lsentencepiece -lpcre2-8 -licuuc -lpthread -o dl
//   ./dl q8_0 512 200 [method]   (weights, context, steps)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include "veloxquant/model.hpp"
#include "veloxquant/threads.hpp"
using namespace vq;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char** argv) {
  const std::string type = argc > 1 ? argv[1] : "q8_0";
  const int ctx = argc > 2 ? atoi(argv[2]) : 512;
  const int steps = argc > 3 ? atoi(argv[3]) : 200;
  const std::string method = argc > 4 ? argv[4] : "full";
  set_thread_count(2);
  ModelConfig c;
  c.dim = 2048;
  c.n_layers = 16;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.hidden_dim = 8192;
  c.vocab_size = 32000;
  c.seq_len = 8192;
  const GgmlType t = type == "q4_k"   ? GgmlType::Q4_K
                     : type == "bf16" ? GgmlType::BF16
                                      : GgmlType::Q8_0;
  Model m = Model::random_typed(c, t, 1);
  Engine e(m, method);
  std::vector<int32_t> toks(ctx);
  for (int i = 0; i < ctx; i++) toks[i] = (i * 7919) % 32000;
  e.prefill(toks, false);
  int32_t nx = 1;
  e.step(nx);
  for (int r = 0; r < steps / 16; r++) {
    const double t0 = now();
    for (int s = 0; s < 16; s++) nx = static_cast<int32_t>(e.step(nx)[0] > 0 ? 5 : 9);
    printf(" %.1f", 16 / (now() - t0));
    fflush(stdout);
  }
  printf(" tok/s\n");
}

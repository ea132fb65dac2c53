// Session 32: futex calls and context switches over 100 decode steps (Q4_K, `full`, context
// 512) with the pool's yield span 0 or 200 µs (the temporary switch vq::g_yield_us, see
// ab_pool.cpp): perf stat -e 'syscalls:sys_enter_futex,context-switches' ./cnt 0 | 200.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include "veloxquant/model.hpp"
#include "veloxquant/threads.hpp"
namespace vq {
extern int64_t g_yield_us;
}
using namespace vq;
int main(int argc, char** argv) {
  set_thread_count(2);
  ModelConfig c;
  c.dim = 2048;
  c.n_layers = 16;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.hidden_dim = 8192;
  c.vocab_size = 32000;
  c.seq_len = 8192;
  Model m = Model::random_typed(c, GgmlType::Q4_K, 1);
  Engine e(m, std::string("full"));
  std::vector<int32_t> toks(512);
  for (int i = 0; i < 512; i++) toks[i] = (i * 7919) % 32000;
  e.prefill(toks, false);
  g_yield_us = atoi(argv[1]);
  fprintf(stderr, "START\n");
  int32_t nx = 1;
  for (int s = 0; s < 100; s++) nx = static_cast<int32_t>(e.step(nx)[0] > 0 ? 5 : 9);
}

// Session 32: in one process, decode steps (`full`) alternating by rounds of 8 between four
// settings of two temporary switches compiled into the library for this measurement only (not
// kept in this form): vq::g_yield_us (the thread pool's yield span after its pauses: 0 or 200 µs;
// not kept either, see docs/eval.md) and vq::kernels::g_fuse_products (the q/k/v and
// gate/up products as one loop each: a matvec_many, measured +0-3%, not kept). Does not build
// against the committed library; kept with its output (runs.txt).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include "veloxquant/model.hpp"
#include "veloxquant/threads.hpp"
namespace vq {
extern int64_t g_yield_us;
namespace kernels {
extern bool g_fuse_products;
}
}  // namespace vq
using namespace vq;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char** argv) {
  const std::string type = argc > 1 ? argv[1] : "q4_k";
  const int rounds = argc > 2 ? atoi(argv[2]) : 12;
  const int ctx = argc > 3 ? atoi(argv[3]) : 512;
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
  Engine e(m, std::string("full"));
  std::vector<int32_t> toks(ctx);
  for (int i = 0; i < ctx; i++) toks[i] = (i * 7919) % 32000;
  e.prefill(toks, false);
  int32_t nx = 1;
  // 4 configs: fuse x spin
  const int fuse[4] = {0, 1, 0, 1}, spin[4] = {0, 0, 200, 200};
  double tot[4] = {0, 0, 0, 0};
  int wins = 0;
  for (int r = 0; r < rounds; r++) {
    double tr[4];
    for (int k = 0; k < 4; k++) {
      const int cfg = (k + r) % 4;
      kernels::g_fuse_products = fuse[cfg];
      g_yield_us = spin[cfg];
      nx = static_cast<int32_t>(e.step(nx)[0] > 0 ? 5 : 9);  // warm
      const double t0 = now();
      for (int s = 0; s < 8; s++) nx = static_cast<int32_t>(e.step(nx)[0] > 0 ? 5 : 9);
      tr[cfg] = now() - t0;
      tot[cfg] += tr[cfg];
    }
    if (tr[1] < tr[0]) wins++;
    printf("round %2d:  base %.1f  fuse %.1f  spin %.1f  both %.1f tok/s\n", r, 8 / tr[0],
           8 / tr[1], 8 / tr[2], 8 / tr[3]);
  }
  printf(
      "%s ctx %d: base %.2f  fuse %.2f (%.3fx)  spin %.2f (%.3fx)  both %.2f (%.3fx) tok/s; fuse "
      "faster in %d/%d\n",
      type.c_str(), ctx, 8 * rounds / tot[0], 8 * rounds / tot[1], tot[0] / tot[1],
      8 * rounds / tot[2], tot[0] / tot[2], 8 * rounds / tot[3], tot[0] / tot[3], wins, rounds);
}

// Session 34. In one process: decode rounds of 8 steps under four settings of two temporary
// library switches compiled in for this measurement only: vq::g_pool_lockfree (the pool's
// handshake by a mutex, as committed, or by atomics alone; not kept) and vq::g_par_swiglu (the
// SwiGLU product serial, or on the pool as committed in this session). The order of the four is
// rotated each round; the ratio is each round's tok/s over the same round's `base`, median of
// rounds. Does not build against the committed library (the switches are gone); kept with its
// output (runs.txt).
//   ./ab q4_k 16 512   (weights, rounds, context)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include "veloxquant/model.hpp"
#include "veloxquant/threads.hpp"
namespace vq {
extern bool g_pool_lockfree;
extern bool g_par_swiglu;
}  // namespace vq
using namespace vq;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char** argv) {
  const std::string type = argc > 1 ? argv[1] : "q4_k";
  const int rounds = argc > 2 ? atoi(argv[2]) : 12;
  const int ctx = argc > 3 ? atoi(argv[3]) : 512;
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
  std::vector<double> tps[4];
  const char* names[4] = {"base", "atomics", "swiglu", "both"};
  for (int r = 0; r < rounds; r++) {
    for (int k = 0; k < 4; k++) {
      const int v = (k + r) % 4;
      g_pool_lockfree = v & 1;
      g_par_swiglu = v & 2;
      set_thread_count(1);
      set_thread_count(2);
      nx = static_cast<int32_t>(e.step(nx)[0] > 0 ? 5 : 9);
      const double t0 = now();
      for (int s = 0; s < 8; s++) nx = static_cast<int32_t>(e.step(nx)[0] > 0 ? 5 : 9);
      tps[v].push_back(8 / (now() - t0));
    }
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  printf("%s %s ctx %d, %d rounds:", type.c_str(), method.c_str(), ctx, rounds);
  for (int v = 0; v < 4; v++) {
    std::vector<double> ratio;
    for (size_t i = 0; i < tps[v].size(); i++) ratio.push_back(tps[v][i] / tps[0][i]);
    printf("  %s %.2f (%.3fx)", names[v], med(tps[v]), med(ratio));
  }
  printf("\n");
}

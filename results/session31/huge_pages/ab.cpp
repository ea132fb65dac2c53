// Session 31: does decode gain from weights on 2 MiB pages? Two identical random 1B-shaped
// models (same seed, same bytes) in one process, one built with VQ_HUGE_PAGES=0 (4 KiB pages),
// one with huge pages; their engines (`full`, context 512) take turns by rounds of 8 steps, the
// order swapped every round, so the machine's drift reaches both alike. `hugefirst` builds the
// huge-page model first (the allocation order swapped). Build (after the project's build):
//   g++ -O3 -march=native -std=c++20 -I include -I src results/session31/huge_pages/ab.cpp
//       build/lib/libveloxquant.a -lzstd -lxxhash -lsentencepiece -lpcre2-8 -licuuc -lpthread -o ab
//   ./ab q8_0 12 [hugefirst]     (weights q8_0 | q4_k | bf16, rounds)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include "veloxquant/model.hpp"
#include "veloxquant/threads.hpp"
using namespace vq;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char** argv) {
  const char* type = argc > 1 ? argv[1] : "q8_0";
  int rounds = argc > 2 ? atoi(argv[2]) : 10;
  set_thread_count(2);
  ModelConfig c;
  c.dim = 2048;
  c.n_layers = 16;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.hidden_dim = 8192;
  c.vocab_size = 32000;
  c.seq_len = 2048;
  GgmlType t = std::string(type) == "q4_k"   ? GgmlType::Q4_K
               : std::string(type) == "bf16" ? GgmlType::BF16
                                             : GgmlType::Q8_0;
  bool hugefirst = argc > 3 && std::string(argv[3]) == "hugefirst";
  auto mk = [&](bool h) {
    setenv("VQ_HUGE_PAGES", h ? "1" : "0", 1);
    return Model::random_typed(c, t, 1);
  };
  std::unique_ptr<Model> sp, hp;
  if (hugefirst) {
    hp = std::make_unique<Model>(mk(true));
    sp = std::make_unique<Model>(mk(false));
  } else {
    sp = std::make_unique<Model>(mk(false));
    hp = std::make_unique<Model>(mk(true));
  }
  Model& small = *sp;
  Model& huge = *hp;
  {
    FILE* f = fopen("/proc/self/smaps_rollup", "r");
    char l[256];
    while (fgets(l, 256, f))
      if (!strncmp(l, "AnonHuge", 8)) printf("%s", l);
    fclose(f);
  }
  Engine a(small, std::string("full")), b(huge, std::string("full"));
  std::vector<int32_t> toks(512);
  for (int i = 0; i < 512; i++) toks[i] = (i * 7919) % 32000;
  a.prefill(toks, false);
  b.prefill(toks, false);
  int32_t na = 1, nb = 1;
  a.step(na);
  b.step(nb);
  double ta = 0, tb = 0;
  std::vector<double> ra, rb;
  for (int r = 0; r < rounds; r++) {
    for (int k = 0; k < 2; k++) {
      bool A = (r % 2 == 0) == (k == 0);
      double t0 = now();
      for (int s = 0; s < 8; s++) {
        if (A)
          na = (int32_t)(a.step(na)[0] > 0 ? 5 : 9);
        else
          nb = (int32_t)(b.step(nb)[0] > 0 ? 5 : 9);
      }
      double d = now() - t0;
      if (A) {
        ta += d;
        ra.push_back(8 / d);
      } else {
        tb += d;
        rb.push_back(8 / d);
      }
    }
  }
  printf("%s 4K pages %.1f tok/s  2M pages %.1f tok/s  ratio %.3f\n", type, 8 * rounds / ta,
         8 * rounds / tb, ta / tb);
  for (size_t i = 0; i < ra.size(); i++) printf("  %.1f/%.1f", ra[i], rb[i]);
  printf("\n");
}

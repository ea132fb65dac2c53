// Session 32: an FNV hash of the logits of 20 greedy decode steps on a small random model (dim
// 512, 2 layers, hidden 1536; Q8_0 / Q4_K / BF16 weights), for checking that a kernel change
// keeps every bit: built against the library before and after the change, at 1 and 2 threads.
//   g++ -O3 -march=native -std=c++20 -I include -I src results/session32/logits_hash.cpp
//       build/lib/libveloxquant.a -lzstd -lxxhash -lsentencepiece -lpcre2-8 -licuuc -lpthread -o h
//   ./h q8_0 2
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include "veloxquant/model.hpp"
#include "veloxquant/threads.hpp"
using namespace vq;
int main(int argc, char** argv) {
  set_thread_count(argc > 2 ? atoi(argv[2]) : 2);
  ModelConfig c;
  c.dim = 512;
  c.n_layers = 2;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.hidden_dim = 1536;
  c.vocab_size = 1000;
  c.seq_len = 256;
  const std::string type = argc > 1 ? argv[1] : "q8_0";
  const GgmlType t = type == "q4_k"   ? GgmlType::Q4_K
                     : type == "bf16" ? GgmlType::BF16
                                      : GgmlType::Q8_0;
  Model m = Model::random_typed(c, t, 3);
  Engine e(m, std::string("full"));
  std::vector<int32_t> toks(40);
  for (int i = 0; i < 40; i++) toks[i] = (i * 7919) % 1000;
  e.prefill(toks, false);
  uint64_t h = 1469598103934665603ull;
  int32_t nx = 1;
  for (int s = 0; s < 20; s++) {
    const float* l = e.step(nx);
    for (int i = 0; i < 1000; i++) {
      uint32_t u;
      memcpy(&u, l + i, 4);
      h = (h ^ u) * 1099511628211ull;
    }
    int best = 0;
    for (int i = 1; i < 1000; i++)
      if (l[i] > l[best]) best = i;
    nx = best;
  }
  printf("%s %016llx\n", type.c_str(), (unsigned long long)h);
}

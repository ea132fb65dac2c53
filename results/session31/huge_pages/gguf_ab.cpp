// Session 31: a 1B-shaped random Q8_0 model written as a GGUF file, then opened twice, mapped
// (FileLoad::Map) and read into memory (FileLoad::Copy); their engines take turns by rounds of 8
// decode steps (`full`, context 512), the order swapped every round. Build (after the
// project's build; the GGUF writer is the tests' own):
//   g++ -O3 -march=native -std=c++20 -I include -I src -I tests
//       results/session31/huge_pages/gguf_ab.cpp build/lib/libveloxquant.a -lzstd -lxxhash
//       -lsentencepiece -lpcre2-8 -licuuc -lpthread -o gguf_ab
//   ./gguf_ab /tmp/vq_1b_q8_0.gguf 12     (the file is written first when it does not exist)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>
#include "formats/file_writers.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/threads.hpp"
using namespace vq;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "/tmp/vq_1b_q8_0.gguf";
  const int rounds = argc > 2 ? atoi(argv[2]) : 10;
  set_thread_count(2);
  ModelConfig c;
  c.dim = 2048;
  c.n_layers = 16;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.hidden_dim = 8192;
  c.vocab_size = 32000;
  c.seq_len = 2048;
  if (!std::ifstream(path).good()) {
    const Model r = Model::random_typed(c, GgmlType::Q8_0, 1);
    vqtest::GgufWriter w;
    const std::string p = "llama.";
    w.kv_string("general.architecture", "llama");
    w.kv<uint32_t>(p + "embedding_length", 4, 2048);
    w.kv<uint32_t>(p + "block_count", 4, 16);
    w.kv<uint32_t>(p + "attention.head_count", 4, 32);
    w.kv<uint32_t>(p + "attention.head_count_kv", 4, 8);
    w.kv<uint32_t>(p + "feed_forward_length", 4, 8192);
    w.kv<uint32_t>(p + "context_length", 4, 2048);
    w.kv<float>(p + "rope.freq_base", 6, 10000.0f);
    w.kv<float>(p + "attention.layer_norm_rms_epsilon", 6, 1e-5f);
    for (const std::string& n : r.weights()->names()) {
      const WeightTensor& t = r.weights()->get(n);
      std::vector<uint64_t> dims(t.shape.rbegin(), t.shape.rend());
      w.tensor(n, static_cast<uint32_t>(t.type), dims, vqtest::Bytes(t.data, t.data + t.bytes));
    }
    const vqtest::Bytes b = w.build();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
    printf("wrote %s (%zu bytes)\n", path.c_str(), b.size());
  }
  double t0 = now();
  Model mm = Model::open(path, FileLoad::Map);
  const double open_map = now() - t0;
  t0 = now();
  Model mc = Model::open(path, FileLoad::Copy);
  const double open_copy = now() - t0;
  Engine a(mm, std::string("full")), b(mc, std::string("full"));
  std::vector<int32_t> toks(512);
  for (int i = 0; i < 512; i++) toks[i] = (i * 7919) % 32000;
  a.prefill(toks, false);
  b.prefill(toks, false);
  int32_t na = 1, nb = 1;
  a.step(na);
  b.step(nb);
  double ta = 0, tb = 0;
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < 2; k++) {
      const bool A = (r % 2 == 0) == (k == 0);
      const double s0 = now();
      for (int s = 0; s < 8; s++) {
        if (A)
          na = a.step(na)[0] > 0 ? 5 : 9;
        else
          nb = b.step(nb)[0] > 0 ? 5 : 9;
      }
      const double d = now() - s0;
      (A ? ta : tb) += d;
      printf(" %s %.1f", A ? "map" : "copy", 8 / d);
    }
  printf("\nopen: map %.3f s, copy %.3f s; decode: map %.1f tok/s, copy %.1f tok/s, ratio %.3f\n",
         open_map, open_copy, 8 * rounds / ta, 8 * rounds / tb, ta / tb);
}

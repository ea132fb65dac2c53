// Session 34 (from session 32's products.cpp): where the weight products of a decode step lose
// time, with two more references: the big matrix cut into the step's sizes (slices: the cost of
// many products rather than one), and one matrix of the down projection's 8192-value rows.
// Session 32's description follows.
// Where the weight products of a decode step lose time. The random 1B-shaped model's
// 113 products run in the engine's order (kernels::matvec on the pool's threads), each timed;
// printed per kind (wq, wk, ..., output): µs per product and GB/s. Then the same bytes as one
// product over a single matrix (a contiguous buffer of as many rows of 2048 values) for the
// streaming rate the kernel reaches when nothing stops it. Build (after the project's build):
//   g++ -O3 -march=native -std=c++20 -I include -I src results/session32/products.cpp
//       build/lib/libveloxquant.a -lzstd -lxxhash -lsentencepiece -lpcre2-8 -licuuc -lpthread -o pr
//   ./pr q4_k 10   (weights, passes)   (this file: results/session34/products_slices.cpp)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>
#include "core/large_buffer.hpp"
#include "kernels/matmul.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/threads.hpp"
using namespace vq;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char** argv) {
  const std::string type = argc > 1 ? argv[1] : "q4_k";
  const int passes = argc > 2 ? atoi(argv[2]) : 10;
  set_thread_count(2);
  ModelConfig c;
  c.dim = 2048;
  c.n_layers = 16;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.hidden_dim = 8192;
  c.vocab_size = 32000;
  c.seq_len = 2048;
  const GgmlType t = type == "q4_k"   ? GgmlType::Q4_K
                     : type == "bf16" ? GgmlType::BF16
                                      : GgmlType::Q8_0;
  Model m = Model::random_typed(c, t, 1);
  std::vector<std::pair<std::string, WeightMatrix>> seq;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerTensors L = m.tensors(l);
    for (auto& p : std::vector<std::pair<std::string, WeightMatrix>>{{"wq", L.wq},
                                                                     {"wk", L.wk},
                                                                     {"wv", L.wv},
                                                                     {"wo", L.wo},
                                                                     {"w1", L.w1},
                                                                     {"w3", L.w3},
                                                                     {"w2", L.w2}})
      seq.push_back(p);
  }
  seq.push_back({"out", m.output_matrix()});
  std::vector<float> x(8192), y(32000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>((i * 37) % 200) - 1.0f;
  std::map<std::string, std::vector<double>> per;  // best per kind: sum over its products
  std::map<std::string, double> bytes;
  for (auto& [k, w] : seq) bytes[k] += static_cast<double>(w.rows) * w.row_bytes();
  // one big matrix with the same bytes
  const WeightMatrix& w0 = seq[0].second;
  uint64_t total = 0;
  for (auto& kv : bytes) total += static_cast<uint64_t>(kv.second);
  const int64_t big_rows = static_cast<int64_t>(total / w0.row_bytes());
  LargeBuffer buf = allocate_large(static_cast<uint64_t>(big_rows) * w0.row_bytes());
  for (int64_t r = 0; r < big_rows; ++r)  // rows copied from the model's (valid blocks)
    std::copy_n(w0.data + (r % w0.rows) * w0.row_bytes(), w0.row_bytes(),
                buf.data.get() + r * w0.row_bytes());
  WeightMatrix big = w0;
  big.data = buf.data.get();
  big.rows = big_rows;
  std::vector<float> ybig(static_cast<size_t>(big_rows));
  const WeightMatrix& w2m = seq[6].second;  // w2 of layer 0
  const int64_t big2_rows = static_cast<int64_t>(total / w2m.row_bytes());
  LargeBuffer buf2 = allocate_large(static_cast<uint64_t>(big2_rows) * w2m.row_bytes());
  for (int64_t r = 0; r < big2_rows; ++r)
    std::copy_n(w2m.data + (r % w2m.rows) * w2m.row_bytes(), w2m.row_bytes(),
                buf2.data.get() + r * w2m.row_bytes());
  WeightMatrix big2 = w2m;
  big2.data = buf2.data.get();
  big2.rows = big2_rows;
  std::vector<float> ybig2(static_cast<size_t>(big2_rows));
  double best_big2 = 1e9;
  double best_step = 1e9, best_big = 1e9, best_slices = 1e9;
  std::map<std::string, double> best_kind;
  for (int p = 0; p < passes; ++p) {
    std::map<std::string, double> kind;
    const double t0 = now();
    for (auto& [k, w] : seq) {
      const double a = now();
      kernels::matvec(w, x.data(), y.data());
      kind[k] += now() - a;
    }
    const double st = now() - t0;
    if (st < best_step) {
      best_step = st;
      best_kind = kind;
    }
    const double b0 = now();
    kernels::matvec(big, x.data(), ybig.data());
    best_big = std::min(best_big, now() - b0);
    const double b2 = now();
    kernels::matvec(big2, x.data(), ybig2.data());
    best_big2 = std::min(best_big2, now() - b2);
    // the big buffer cut into the step's sizes, in the step's order
    const double s0 = now();
    int64_t off = 0;
    for (auto& [k, w] : seq) {
      const int64_t nr =
          static_cast<int64_t>(static_cast<double>(w.rows) * w.row_bytes() / w0.row_bytes());
      WeightMatrix part = big;
      part.data = big.data + off * w0.row_bytes();
      part.rows = nr;
      kernels::matvec(part, x.data(), ybig.data());
      off += nr;
    }
    best_slices = std::min(best_slices, now() - s0);
  }
  printf(
      "%s: step's products %.2f ms (%.1f GB/s over %.1f MB); one matrix of the same bytes %.2f ms "
      "(%.1f GB/s)\n",
      type.c_str(), best_step * 1e3, total / best_step / 1e9, total / 1e6, best_big * 1e3,
      total / best_big / 1e9);
  printf("one matrix of %lld-col rows: %.2f ms (%.1f GB/s)\n", (long long)w2m.cols, best_big2 * 1e3,
         total / best_big2 / 1e9);
  printf("slices of the big matrix in the step's sizes: %.2f ms (%.1f GB/s)\n", best_slices * 1e3,
         total / best_slices / 1e9);
  {
    FILE* f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
      if (strstr(line, "AnonHuge")) fputs(line, stdout);
    if (f) fclose(f);
  }
  for (auto& [k, s] : best_kind)
    printf("  %-4s %7.2f ms  %6.1f GB/s\n", k.c_str(), s * 1e3, bytes[k] / s / 1e9);
}

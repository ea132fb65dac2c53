// Session 32: an FNV hash of one matvec's outputs (96 x 2304: nine K-quant super-blocks, 72
// Q8_0 blocks, i.e. four 16-block groups and 8 left over) for Q4_K (quantized random normals),
// Q5_K (random bytes with small positive fp16 d / dmin) and Q8_0, built against the library
// before and after a kernel change. Same build line as logits_hash.cpp.
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "kernels/matmul.hpp"
#include "veloxquant/gguf.hpp"
#include "veloxquant/weight_matrix.hpp"
using namespace vq;
int main() {
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q8_0}) {
    const int64_t rows = 96, cols = 2304;  // 9 super-blocks, 72 Q8_0 blocks
    std::mt19937 g(7);
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> W(rows * cols), x(cols);
    for (auto& v : W) v = nd(g);
    for (auto& v : x) v = nd(g) * (1 + (g() % 7 == 0 ? 20 : 0));
    x[5] = 0;
    std::vector<uint8_t> q(ggml_row_bytes(t, cols) * rows);
    if (t == GgmlType::Q5_K) {
      for (auto& b : q) b = static_cast<uint8_t>(g());
      for (size_t o = 0; o < q.size(); o += 176) {
        const uint16_t d = 0x2000 + g() % 0x800, m = 0x1c00 + g() % 0x800;  // small positive fp16
        memcpy(&q[o], &d, 2);
        memcpy(&q[o + 2], &m, 2);
      }
    } else {
      ggml_quantize(t, W.data(), q.data(), rows * cols);
    }
    WeightMatrix w{t, q.data(), rows, cols};
    std::vector<float> y(rows);
    kernels::matvec(w, x.data(), y.data());
    uint64_t h = 1469598103934665603ull;
    for (float f : y) {
      uint32_t u;
      memcpy(&u, &f, 4);
      h = (h ^ u) * 1099511628211ull;
    }
    printf("%s %016llx %.6f\n", ggml_type_name(static_cast<uint32_t>(t)), (unsigned long long)h,
           y[0]);
  }
}

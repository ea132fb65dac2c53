// Session 34: prepare_row_dot_input alone (best of 200), Q4_K / Q8_0 / BF16 at 2048 and 8192
// values.
//   g++ -O3 -march=native -std=c++20 -I include -I src results/session34/prepare_input.cpp
//       build/lib/libveloxquant.a -lzstd -lxxhash -lsentencepiece -lpcre2-8 -licuuc -lpthread -o p
#include <chrono>
#include <cstdio>
#include <vector>
#include "kernels/row_dot.hpp"
using namespace vq;
int main() {
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::BF16})
    for (int64_t cols : {2048, 8192}) {
      std::vector<float> x(cols);
      for (int64_t i = 0; i < cols; i++) x[i] = 0.01f * ((i * 37) % 200) - 1.0f;
      kernels::detail::RowDotInput in;
      double best = 1e9;
      for (int r = 0; r < 200; r++) {
        auto t0 = std::chrono::steady_clock::now();
        kernels::detail::prepare_row_dot_input(t, x.data(), cols, in);
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      printf("type %d cols %ld: %.2f us\n", (int)t, (long)cols, best * 1e6);
    }
}

// Session 34: the SwiGLU loop alone (serial), ns a value, for decode's 8192 values and a 512-token
// prefill's 4M. Standalone: g++ -O3 -march=native -std=c++20 silu_loop.cpp -o s && ./s
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>
inline float silu(float x) {
  return x / (1.0f + std::exp(-x));
}
__attribute__((noinline)) void sw(float* a, const float* b, long n) {
  for (long i = 0; i < n; ++i) a[i] = silu(a[i]) * b[i];
}
int main() {
  for (long n : {8192L, 512L * 8192}) {
    std::vector<float> a(n), b(n), a0(n);
    for (long i = 0; i < n; i++) {
      a0[i] = 0.001f * (i % 3000) - 1.5f;
      b[i] = 0.5f;
    }
    double best = 1e9;
    for (int r = 0; r < 20; r++) {
      a = a0;
      auto t0 = std::chrono::steady_clock::now();
      sw(a.data(), b.data(), n);
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    printf("n %ld: %.1f us (%.2f ns/value)\n", n, best * 1e6, best * 1e9 / n);
  }
}

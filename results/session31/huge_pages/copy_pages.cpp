// Session 31: a two-thread copy between two arrays (MiB each, first argument) on 4 KiB pages (0)
// or advised for 2 MiB pages (1); best of 20 copies, bytes read + written per second. Build:
//   g++ -O3 -march=native -pthread results/session31/huge_pages/copy_pages.cpp -o copy_pages
//   ./copy_pages 256 1
#include <sys/mman.h>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
using namespace std;
static double now() {
  return chrono::duration<double>(chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char** argv) {
  size_t bytes = size_t(atol(argv[1])) << 20;
  int huge = atoi(argv[2]);
  char* a = (char*)aligned_alloc(1 << 21, bytes);
  char* b = (char*)aligned_alloc(1 << 21, bytes);
  if (huge) {
    madvise(a, bytes, MADV_HUGEPAGE);
    madvise(b, bytes, MADV_HUGEPAGE);
  }
  auto set = [&](int t) {
    memset(a + t * bytes / 2, 1, bytes / 2);
    memset(b + t * bytes / 2, 2, bytes / 2);
  };
  {
    thread t1(set, 1);
    set(0);
    t1.join();
  }
  double best = 1e9;
  for (int r = 0; r < 20; r++) {
    char* s = r % 2 ? a : b;
    char* d = r % 2 ? b : a;
    double t0 = now();
    auto cp = [&](int t) {
      for (size_t c = t * bytes / 2; c < (t + 1) * bytes / 2; c += 1 << 21)
        memcpy(d + c, s + c, 1 << 21);
    };
    thread t1(cp, 1);
    cp(0);
    t1.join();
    best = min(best, now() - t0);
  }
  printf("copy %zu MiB huge=%d: %.1f GB/s\n", bytes >> 20, huge, 2 * bytes / best / 1e9);
}

// Session 31: a two-thread plain read of one array (MiB, first argument) on 4 KiB pages (0) or
// advised for 2 MiB pages (1); best of 10 passes; prints the process's AnonHugePages. Build:
//   g++ -O3 -march=native -pthread results/session31/huge_pages/read_pages.cpp -o read_pages
//   ./read_pages 1024 1
#include <sys/mman.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
using namespace std;
static double now() {
  return chrono::duration<double>(chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char** argv) {
  size_t bytes = size_t(atol(argv[1])) << 20;
  int huge = atoi(argv[2]);
  void* p = aligned_alloc(1 << 21, bytes);
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);
  uint64_t* a = (uint64_t*)p;
  size_t w = bytes / 8;
  auto touch = [&](int t) {
    for (size_t i = t * w / 2; i < (t + 1) * w / 2; i++) a[i] = i;
  };
  {
    thread t1(touch, 1);
    touch(0);
    t1.join();
  }
  double best = 1e9;
  uint64_t sink[2];
  for (int r = 0; r < 10; r++) {
    double t0 = now();
    auto rd = [&](int t) {
      uint64_t l[8] = {};
      for (size_t i = t * w / 2; i < (t + 1) * w / 2; i += 8)
        for (int k = 0; k < 8; k++) l[k] += a[i + k];
      sink[t] = l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
    };
    thread t1(rd, 1);
    rd(0);
    t1.join();
    best = min(best, now() - t0);
  }
  FILE* f = fopen("/proc/self/smaps_rollup", "r");
  char line[256];
  long ah = 0;
  while (fgets(line, 256, f))
    if (!strncmp(line, "AnonHugePages", 13)) sscanf(line + 14, "%ld", &ah);
  printf("%zu MiB huge=%d: %.1f GB/s (AnonHuge %ld kB) %lu\n", bytes >> 20, huge,
         bytes / best / 1e9, ah, (unsigned long)(sink[0] + sink[1]));
}

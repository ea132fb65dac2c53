// Session 31: a two-thread plain read of one array (MiB, first argument; 2 MiB pages when the
// second argument is 1), each thread reading its half as K streams advanced in lockstep (K = 1,
// 2, 4, 8; 256 bytes per stream per step, AVX-512 loads); best of 5 passes, three rounds. Build:
//   g++ -O3 -march=native -pthread results/session31/huge_pages/read_streams.cpp -o read_streams
//   ./read_streams 1024 1
#include <immintrin.h>
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
volatile long long sinkv;
// each thread reads its half as K sub-streams advanced in lockstep, chunk of 1KB each
template <int K>
void rd(const char* p, size_t n) {
  __m512i acc[K];
  for (int k = 0; k < K; k++) acc[k] = _mm512_setzero_si512();
  size_t part = n / K;
  for (size_t i = 0; i < part; i += 256)
    for (int k = 0; k < K; k++) {
      const char* q = p + k * part + i;
      acc[k] = _mm512_add_epi64(
          acc[k], _mm512_add_epi64(
                      _mm512_add_epi64(_mm512_loadu_si512(q), _mm512_loadu_si512(q + 64)),
                      _mm512_add_epi64(_mm512_loadu_si512(q + 128), _mm512_loadu_si512(q + 192))));
    }
  long long s = 0;
  for (int k = 0; k < K; k++) s += _mm512_reduce_add_epi64(acc[k]);
  sinkv = s;
}
int main(int argc, char** argv) {
  size_t bytes = size_t(atol(argv[1])) << 20;
  int huge = atoi(argv[2]);
  char* a = (char*)aligned_alloc(1 << 21, bytes);
  if (huge) madvise(a, bytes, MADV_HUGEPAGE);
  {
    thread t([&] { memset(a + bytes / 2, 1, bytes / 2); });
    memset(a, 1, bytes / 2);
    t.join();
  }
  for (int rep = 0; rep < 3; rep++)
    for (int K : {1, 2, 4, 8}) {
      double best = 1e9;
      for (int r = 0; r < 5; r++) {
        double t0 = now();
        auto f = [&](int t) {
          const char* p = a + t * bytes / 2;
          if (K == 1)
            rd<1>(p, bytes / 2);
          else if (K == 2)
            rd<2>(p, bytes / 2);
          else if (K == 4)
            rd<4>(p, bytes / 2);
          else
            rd<8>(p, bytes / 2);
        };
        thread t1(f, 1);
        f(0);
        t1.join();
        best = min(best, now() - t0);
      }
      printf("K=%d %.1f GB/s  ", K, bytes / best / 1e9);
    }
  printf("\n");
}

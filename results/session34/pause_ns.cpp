// Session 34: the time of one x86 pause instruction (the thread pool's waiters pause 1000 times
// before they sleep). Standalone: g++ -O2 pause_ns.cpp -o p && ./p
#include <chrono>
#include <cstdio>
int main() {
  for (int r = 0; r < 3; r++) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 1000000; i++) __builtin_ia32_pause();
    auto t1 = std::chrono::steady_clock::now();
    printf("%.2f ns per pause\n", std::chrono::duration<double>(t1 - t0).count() * 1e3);
  }
}

#include "core/large_buffer.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>

namespace {

bool aligned_to(const void* p, size_t a) {
  return reinterpret_cast<uintptr_t>(p) % a == 0;
}

// Sets an environment variable for the test's scope, restoring what was there.
struct EnvGuard {
  std::string name, old;
  bool had;
  EnvGuard(const char* n, const char* v) : name(n) {
    const char* o = std::getenv(n);
    had = o != nullptr;
    if (had) old = o;
    setenv(n, v, 1);
  }
  ~EnvGuard() {
    if (had)
      setenv(name.c_str(), old.c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

TEST(LargeBuffer, LargeArraysSitOnWholeHugePages) {
  EnvGuard on("VQ_HUGE_PAGES", "1");  // whatever the environment running the tests says
  const size_t n = 3 * vq::kHugePageBytes + 5;
  const vq::LargeBuffer b = vq::allocate_large(n);
  ASSERT_NE(b.data, nullptr);
  EXPECT_EQ(b.bytes, n);
#if defined(__linux__)
  EXPECT_EQ(b.allocated, 4 * vq::kHugePageBytes);
  EXPECT_TRUE(aligned_to(b.data.get(), vq::kHugePageBytes));
  // Where the kernel has transparent huge pages, it takes the advice (whether it then finds free
  // 2 MiB frames is its own business).
  if (std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled")) {
    EXPECT_TRUE(b.huge_pages_advised);
  }
#else
  EXPECT_EQ(b.allocated, n + 59);  // 64-byte units from the heap
  EXPECT_FALSE(b.huge_pages_advised);
#endif
  // Every byte asked for is usable and keeps its value.
  std::memset(b.data.get(), 0xA5, n);
  EXPECT_EQ(b.data.get()[0], 0xA5);
  EXPECT_EQ(b.data.get()[n - 1], 0xA5);
}

TEST(LargeBuffer, SmallArraysAndTheSwitchGetOrdinaryPages) {
  const vq::LargeBuffer small = vq::allocate_large(1000);
  ASSERT_NE(small.data, nullptr);
  EXPECT_EQ(small.allocated, 1024u);
  EXPECT_TRUE(aligned_to(small.data.get(), 64));
  EXPECT_FALSE(small.huge_pages_advised);

  const vq::LargeBuffer asked_not = vq::allocate_large(4 * vq::kHugePageBytes, false);
  EXPECT_FALSE(asked_not.huge_pages_advised);
  EXPECT_EQ(asked_not.allocated, 4 * vq::kHugePageBytes);

  {
    EnvGuard off("VQ_HUGE_PAGES", "0");
    EXPECT_FALSE(vq::huge_pages_enabled());
    const vq::LargeBuffer b = vq::allocate_large(vq::kHugePageBytes + 1);
    EXPECT_FALSE(b.huge_pages_advised);
#if defined(__linux__)
    // still a mapping of its own (advised for small pages)
    EXPECT_EQ(b.allocated, 2 * vq::kHugePageBytes);
#else
    EXPECT_EQ(b.allocated, vq::kHugePageBytes + 64);
#endif
    std::memset(b.data.get(), 1, b.bytes);
  }
  {
    EnvGuard on("VQ_HUGE_PAGES", "1");
    EXPECT_TRUE(vq::huge_pages_enabled());
  }

  const vq::LargeBuffer none = vq::allocate_large(0);
  EXPECT_EQ(none.data, nullptr);
  EXPECT_EQ(none.allocated, 0u);
}

TEST(LargeBuffer, ASizeWhoseRoundingWouldWrapIsRefused) {
  // Rounded up to 2 MiB (and one unit more for the alignment) it would wrap around to a small
  // allocation.
  EXPECT_THROW(vq::allocate_large(SIZE_MAX - 10), std::bad_alloc);
  EXPECT_THROW(vq::allocate_large(SIZE_MAX - vq::kHugePageBytes), std::bad_alloc);
}

TEST(LargeBuffer, ResidentHugeBytesIsKnownOnLinux) {
#if defined(__linux__)
  if (std::filesystem::exists("/proc/self/smaps_rollup")) {
    const int64_t h = vq::resident_huge_bytes();
    EXPECT_GE(h, 0);
    EXPECT_EQ(h % 1024, 0);  // the kernel counts whole kB
  }
#else
  EXPECT_EQ(vq::resident_huge_bytes(), -1);
#endif
}

}  // namespace

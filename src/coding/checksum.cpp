#include "coding/checksum.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "veloxquant/errors.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace vq::coding {

uint64_t xxh64(const void* data, size_t size) {
  return XXH64(data, size, 0);
}

uint64_t xxh64_file(const std::string& path) {
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> f(std::fopen(path.c_str(), "rb"));
  VQ_CHECK(f, IoError, "cannot open '", path, "': ", std::strerror(errno));
  XXH64_state_t state;
  XXH64_reset(&state, 0);
  std::vector<unsigned char> buf(size_t{1} << 20);
  for (;;) {
    const size_t n = std::fread(buf.data(), 1, buf.size(), f.get());
    if (n > 0) XXH64_update(&state, buf.data(), n);
    if (n < buf.size()) break;
  }
  VQ_CHECK(!std::ferror(f.get()), IoError, "cannot read '", path, "': ", std::strerror(errno));
  return XXH64_digest(&state);
}

}  // namespace vq::coding

// The checksum every VeloxQuant file format uses (.vqkv sections and header, .vqcal).
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::coding {

/// XXH64 with seed 0 (Debian's libxxhash, compiled inline).
uint64_t xxh64(const void* data, size_t size);

}  // namespace vq::coding

// The checksum every VeloxQuant file format uses (.vqkv sections and header, .vqcal, model
// digests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace vq::coding {

/// XXH64 with seed 0 (Debian's libxxhash, compiled inline).
uint64_t xxh64(const void* data, size_t size);

/// XXH64 (seed 0) of a whole file, read in fixed 1 MiB pieces: memory does not grow with the
/// file (a model of several GB). Throws IoError when it cannot be opened or read.
uint64_t xxh64_file(const std::string& path);

}  // namespace vq::coding

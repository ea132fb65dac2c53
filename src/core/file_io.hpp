// Whole-file reads and atomic writes, shared by every layer that touches files (.vqkv / .npy in
// io, calibration files in transform, the CLI's outputs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vq {

/// Largest stream read from something that is not a regular file (a FIFO, a character device
/// such as /dev/stdin or /dev/zero), whose size is not known in advance.
constexpr uint64_t kMaxStreamBytes = uint64_t{1} << 30;

/// The whole file. Throws IoError naming the path when it cannot be opened or read, when it is
/// a directory, or when a non-regular file runs past kMaxStreamBytes (a regular file is read
/// whole: memory follows the data on disk).
std::vector<uint8_t> read_whole_file(const std::string& path);

/// Write `bytes` to `path` so that a failure never leaves a partial file there: a temporary file
/// in the target's directory, renamed over `path` once every byte is written (an existing file
/// stays as it was until then). A symlink is written through (its target is replaced); a path
/// that is not a regular file (a device such as /dev/null, a FIFO) is written in place, since a
/// rename would replace the node itself. Throws IoError naming the path and the reason.
void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace vq

// A read-only memory map of a whole file (RAII). The model readers (GGUF, safetensors) parse
// straight out of the map and hand out pointers into it, so tensors are never copied at load time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace vq {

class MappedFile {
 public:
  MappedFile() = default;
  /// Map `path` read-only. Throws IoError when it cannot be opened, is not a regular file or
  /// cannot be mapped. An empty file gives size() == 0 and data() == nullptr.
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  /// Wrap a copy of `n` bytes (the fuzz targets and tests parse buffers this way).
  static std::shared_ptr<const MappedFile> from_bytes(const void* bytes, size_t n,
                                                      std::string name = "<memory>");
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;  // false: data_ points into owned_
  std::unique_ptr<uint8_t[]> owned_;
  std::string path_;
};

}  // namespace vq

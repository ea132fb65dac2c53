// A whole file's bytes in memory, read-only (RAII): a memory map, or (FileLoad::Copy) one copy
// read in at open. The model readers (GGUF, safetensors) parse straight out of those bytes and
// hand out pointers into them, so no tensor is copied again after open.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace vq {

/// How a model file's bytes come into memory.
enum class FileLoad {
  /// mmap(2), read-only and private: opening is instant, the pages come from the page cache as
  /// they are first read, and processes reading the same file share them.
  Map,
  /// read(2) into this process's own memory, on 2 MiB pages where the system gives them
  /// (transparent huge pages; VQ_HUGE_PAGES=0 turns that off): opening reads the whole file, and
  /// the copy is not shared, but a decode step, which reads every weight, walks far fewer page
  /// tables (docs/eval.md: a 1.1 GB 1B-shaped Q8_0 GGUF decoded at 38.0 -> 40.6 and
  /// 38.7 -> 41.8 tok/s on this project's VM, the two ways alternating in one process).
  Copy,
};

/// "map" or "copy"; InvalidArgument naming the value otherwise.
FileLoad parse_file_load(const std::string& name);
const char* file_load_name(FileLoad how);

class MappedFile {
 public:
  MappedFile() = default;
  /// Map `path` read-only, or (FileLoad::Copy) read it whole into memory. Throws IoError when it
  /// cannot be opened, is not a regular file, cannot be mapped, or (Copy) its bytes cannot be
  /// allocated or read in full (a file that shrinks while it is read is named with both sizes).
  /// An empty file gives size() == 0 and data() == nullptr.
  static std::shared_ptr<const MappedFile> open(const std::string& path,
                                                FileLoad how = FileLoad::Map);
  /// Wrap a copy of `n` bytes (the fuzz targets and tests parse buffers this way).
  static std::shared_ptr<const MappedFile> from_bytes(const void* bytes, size_t n,
                                                      std::string name = "<memory>");
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  /// How the bytes were brought in (from_bytes: Copy).
  FileLoad load() const { return load_; }

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  FileLoad load_ = FileLoad::Copy;  // Map: data_ is mapped (when non-null)
  std::shared_ptr<uint8_t> copy_;   // Copy / from_bytes: the bytes held in memory
  std::string path_;
};

}  // namespace vq

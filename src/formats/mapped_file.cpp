// MappedFile: mmap(2) of a whole file, read-only, private.
#include "veloxquant/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "veloxquant/errors.hpp"

namespace vq {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VQ_CHECK(fd >= 0, IoError, "cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    VQ_THROW(IoError, "cannot stat ", path, ": ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    VQ_THROW(IoError, path, " is not a regular file");
  }
  auto f = std::shared_ptr<MappedFile>(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(f->size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      VQ_THROW(IoError, "cannot map ", path, " (", f->size_, " bytes): ", std::strerror(e));
    }
    f->data_ = static_cast<const uint8_t*>(p);
    f->mapped_ = true;
  }
  ::close(fd);
  return f;
}

std::shared_ptr<const MappedFile> MappedFile::from_bytes(const void* bytes, size_t n,
                                                         std::string name) {
  auto f = std::shared_ptr<MappedFile>(new MappedFile());
  f->path_ = std::move(name);
  f->size_ = n;
  if (n > 0) {
    f->owned_ = std::make_unique<uint8_t[]>(n);
    std::memcpy(f->owned_.get(), bytes, n);
    f->data_ = f->owned_.get();
  }
  return f;
}

MappedFile::~MappedFile() {
  if (mapped_ && data_ != nullptr)
    ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
}

}  // namespace vq

// MappedFile: mmap(2) of a whole file, read-only, private; or (FileLoad::Copy) its bytes read
// into memory on huge pages.
#include "veloxquant/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>

#include "core/large_buffer.hpp"
#include "veloxquant/errors.hpp"

namespace vq {

FileLoad parse_file_load(const std::string& name) {
  if (name == "map") return FileLoad::Map;
  if (name == "copy") return FileLoad::Copy;
  VQ_THROW(InvalidArgument, "weight loading '", name, "' is not one of: map, copy");
}

const char* file_load_name(FileLoad how) {
  return how == FileLoad::Map ? "map" : "copy";
}

namespace {

// Closes a descriptor when it goes out of scope.
struct FdCloser {
  int fd;
  explicit FdCloser(int f) : fd(f) {}
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  ~FdCloser() { ::close(fd); }
};

// Reads all `size` bytes of fd into dst (pieces of at most 1 GiB: read(2) moves at most about
// 2 GiB per call). IoError naming the path when a read fails or the file ends early.
void read_whole(int fd, const std::string& path, uint8_t* dst, uint64_t size) {
  constexpr uint64_t kPiece = uint64_t{1} << 30;
  uint64_t done = 0;
  while (done < size) {
    const ssize_t r = ::pread(fd, dst + done, static_cast<size_t>(std::min(kPiece, size - done)),
                              static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    VQ_CHECK(r >= 0, IoError, "cannot read ", path, " at byte ", done, " of ", size, ": ",
             std::strerror(errno));
    VQ_CHECK(r > 0, IoError, path, " ended after ", done, " of its ", size,
             " bytes while it was being read (did it change?)");
    done += static_cast<uint64_t>(r);
  }
}

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, FileLoad how) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VQ_CHECK(fd >= 0, IoError, "cannot open ", path, ": ", std::strerror(errno));
  const FdCloser closer{fd};  // a map or a copy outlives the descriptor
  struct stat st {};
  VQ_CHECK(::fstat(fd, &st) == 0, IoError, "cannot stat ", path, ": ", std::strerror(errno));
  VQ_CHECK(S_ISREG(st.st_mode), IoError, path, " is not a regular file");
  auto f = std::shared_ptr<MappedFile>(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<uint64_t>(st.st_size);
  f->load_ = how;
  if (f->size_ == 0) return f;
  if (how == FileLoad::Copy) {
    VQ_CHECK(f->size_ <= std::numeric_limits<size_t>::max(), IoError, path, " (", f->size_,
             " bytes) is larger than this system's address space");
    LargeBuffer buf;
    try {
      buf = allocate_large(static_cast<size_t>(f->size_));
    } catch (const std::bad_alloc&) {
      VQ_THROW(IoError, "cannot allocate ", f->size_, " bytes to copy ", path,
               " into memory (load it with map instead)");
    }
    read_whole(fd, path, buf.data.get(), f->size_);
    f->copy_ = std::move(buf.data);
    f->data_ = f->copy_.get();
    return f;
  }
  void* p = ::mmap(nullptr, static_cast<size_t>(f->size_), PROT_READ, MAP_PRIVATE, fd, 0);
  VQ_CHECK(p != MAP_FAILED, IoError, "cannot map ", path, " (", f->size_,
           " bytes): ", std::strerror(errno));
  f->data_ = static_cast<const uint8_t*>(p);
  return f;
}

std::shared_ptr<const MappedFile> MappedFile::from_bytes(const void* bytes, size_t n,
                                                         std::string name) {
  auto f = std::shared_ptr<MappedFile>(new MappedFile());
  f->path_ = std::move(name);
  f->size_ = n;
  if (n > 0) {
    // exactly n bytes, so that the sanitizers catch a parser reading one byte past them
    f->copy_ = std::shared_ptr<uint8_t>(new uint8_t[n], std::default_delete<uint8_t[]>());
    std::memcpy(f->copy_.get(), bytes, n);
    f->data_ = f->copy_.get();
  }
  return f;
}

MappedFile::~MappedFile() {
  if (load_ == FileLoad::Map && data_ != nullptr)
    ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
}

}  // namespace vq

#include "core/file_io.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "veloxquant/errors.hpp"

namespace vq {

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Write a temporary file beside the target and rename it over the target only once every byte
// is on disk: a failure (a full disk, a signal) never leaves a partial file under `path`, and a
// reader sees either the old file or the new one.
void write_via_rename(const std::string& path, const std::vector<uint8_t>& bytes) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string tmp = dir + "." + base + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  VQ_CHECK(fd >= 0, IoError, "cannot open '", path,
           "' for writing: cannot create a temporary file '", tmp,
           "' in the same directory: ", std::strerror(errno));
  // mkstemp creates the file 0600; give it the mode a plain open would (0666 minus the umask).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  (void)::fchmod(fd, static_cast<mode_t>(0666) & ~mask);
  bool ok = true;
  int err = 0;
  size_t done = 0;
  while (ok && done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      err = n < 0 ? errno : ENOSPC;
    } else {
      done += static_cast<size_t>(n);
    }
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    VQ_THROW(IoError, "cannot move the temporary file '", tmp, "' to '", path,
             "': ", std::strerror(err));
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    VQ_THROW(IoError, "failed writing '", path, "' (", done, " of ", bytes.size(),
             " bytes written to a temporary file, now removed; '", path,
             "' is as it was): ", std::strerror(err));
  }
}

}  // namespace

std::vector<uint8_t> read_whole_file(const std::string& path) {
  VQ_CHECK(!path.empty(), IoError, "cannot read a file with an empty name");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0)
    VQ_CHECK(!S_ISDIR(st.st_mode), IoError, "cannot read '", path, "': it is a directory");
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  VQ_CHECK(f, IoError, "cannot open '", path, "': ", std::strerror(errno));
  const bool regular = ::fstat(::fileno(f.get()), &st) == 0 && S_ISREG(st.st_mode);
  std::vector<uint8_t> out;
  if (regular) out.reserve(static_cast<size_t>(st.st_size));
  uint8_t buf[1 << 16];
  for (;;) {
    const size_t n = std::fread(buf, 1, sizeof buf, f.get());
    out.insert(out.end(), buf, buf + n);
    VQ_CHECK(regular || out.size() <= kMaxStreamBytes, IoError, "cannot read '", path,
             "': it is not a regular file and runs past ", kMaxStreamBytes,
             " bytes, the most read from a stream");
    if (n < sizeof buf) break;
  }
  VQ_CHECK(!std::ferror(f.get()), IoError, "cannot read '", path, "': ", std::strerror(errno));
  return out;
}

void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes) {
  VQ_CHECK(!path.empty(), IoError, "cannot write a file with an empty name");
  // Not a regular file (a device such as /dev/null or /dev/stdout, a FIFO): write to it in place;
  // a rename would replace the device node itself.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "wb"));
    VQ_CHECK(f, IoError, "cannot open '", path, "' for writing: ", std::strerror(errno));
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f.get()) == bytes.size();
    const bool closed = std::fclose(f.release()) == 0;
    VQ_CHECK(ok && closed, IoError, "failed writing '", path, "': ", std::strerror(errno));
    return;
  }
  // A symlink is written through (its target is replaced), as a plain open would.
  std::string target = path;
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
    char* real = ::realpath(path.c_str(), nullptr);
    if (real != nullptr) {
      target = real;
      std::free(real);
    }
  }
  write_via_rename(target, bytes);
}

}  // namespace vq

// Error types. Every user mistake (bad shape, bad option, NaN input, corrupt bytes, missing file)
// throws one of these with a message that names the offending value and the limit it broke.
// Broken internal invariants are asserts, not exceptions.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace vq {

/// Base of every error VeloxQuant throws on purpose.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

/// A caller passed something outside the documented contract (shape, option, range, NaN/Inf).
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& msg) : Error(msg) {}
};

/// Stored bytes (a .vqkv file, a checkpoint, a .npy, an entropy-coded stream) are malformed.
class FormatError : public Error {
 public:
  explicit FormatError(const std::string& msg) : Error(msg) {}
};

/// A file could not be opened, read or written.
class IoError : public Error {
 public:
  explicit IoError(const std::string& msg) : Error(msg) {}
};

namespace detail {
template <typename... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

}  // namespace vq

/// Throw `Type` with a message built by streaming every argument, when `cond` is false.
#define VQ_CHECK(cond, Type, ...)                            \
  do {                                                       \
    if (!(cond)) throw Type(::vq::detail::cat(__VA_ARGS__)); \
  } while (0)

#define VQ_THROW(Type, ...) throw Type(::vq::detail::cat(__VA_ARGS__))

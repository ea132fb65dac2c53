// Shared helpers of the fuzz targets (fuzz/fuzz_*.cpp).
//
// A target feeds untrusted bytes to one reader. The contract under test: the reader either
// succeeds or throws a vq::Error subclass (FormatError, InvalidArgument, IoError). Any other
// exception (std::length_error, std::bad_alloc, std::out_of_range, ...) means a size was not
// checked, so it is reported and the process aborts, which libFuzzer records as a crash. Sanitizer
// reports (out-of-bounds reads, overflow UB) abort on their own.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "veloxquant/errors.hpp"

namespace vq::fuzz {

/// Abort with a message: an invariant the target checks does not hold.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

#define VQ_FUZZ_ASSERT(cond, msg)                                   \
  do {                                                              \
    if (!(cond)) ::vq::fuzz::fail(std::string(#cond ": ") + (msg)); \
  } while (0)

/// Run `fn`; a vq::Error is an accepted refusal (returns false), success returns true, anything
/// else aborts.
template <typename Fn>
bool refused_cleanly(Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const vq::Error&) {
    return false;
  } catch (const std::exception& e) {
    fail(std::string("unexpected exception type (not vq::Error): ") + e.what());
  }
}

/// A per-process scratch file path for readers that only take a path (checkpoint, tokenizer).
std::string temp_path(const char* tag);
/// Write `size` bytes to `path` (aborts on failure: that is the harness, not the code under test).
void write_temp(const std::string& path, const unsigned char* data, size_t size);

}  // namespace vq::fuzz

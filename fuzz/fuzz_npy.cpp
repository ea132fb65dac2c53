// Fuzz target: the .npy reader, vq::parse_npy (both '<u2' conventions).
// Invariants: parse succeeds or throws vq::Error; an accepted array holds exactly
// numel * element-size bytes, re-encodes to a file that parses back to the same array, and its
// float view (for float dtypes) has numel values.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_util.hpp"
#include "veloxquant/npy.hpp"

namespace {
void check(const uint8_t* data, size_t size, bool u2_bf16) {
  vq::NpyReadOptions opts;
  opts.u2_as_bfloat16 = u2_bf16;
  vq::NpyArray a;
  if (!vq::fuzz::refused_cleanly([&] { a = vq::parse_npy(data, size, opts); })) return;
  const int64_t n = a.numel();
  VQ_FUZZ_ASSERT(n >= 0, "negative numel");
  VQ_FUZZ_ASSERT(a.bytes.size() == static_cast<size_t>(n) * vq::npy_dtype_size(a.dtype),
                 "byte count differs from numel * element size");
  std::vector<uint8_t> file;
  if (!vq::fuzz::refused_cleanly([&] { file = vq::encode_npy(a); })) {
    vq::fuzz::fail("an accepted array cannot be re-encoded");
  }
  vq::NpyArray b;
  if (!vq::fuzz::refused_cleanly([&] { b = vq::parse_npy(file.data(), file.size(), opts); })) {
    vq::fuzz::fail("re-encoded array does not parse");
  }
  VQ_FUZZ_ASSERT(b.dtype == a.dtype && b.shape == a.shape && b.bytes == a.bytes,
                 "round trip through encode_npy changed the array");
  if (vq::npy_is_float(a.dtype) && n <= (int64_t{1} << 20)) {
    const std::vector<float> f = a.to_float();
    VQ_FUZZ_ASSERT(static_cast<int64_t>(f.size()) == n, "to_float size");
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check(data, size, false);
  check(data, size, true);
  return 0;
}

// Fuzz target: the safetensors reader (vq::SafetensorsFile::parse).
// Invariants: parsing succeeds or throws vq::Error; every accepted tensor's bytes lie inside the
// buffer, equal numel x dtype size, and widen to fp32.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_util.hpp"
#include "veloxquant/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = vq::MappedFile::from_bytes(data, size, "fuzz.safetensors");
  vq::SafetensorsFile f;
  if (!vq::fuzz::refused_cleanly([&] { f = vq::SafetensorsFile::parse(file); })) return 0;
  for (const vq::SafetensorsTensor& t : f.tensors()) {
    VQ_FUZZ_ASSERT(f.data_offset() + t.offset + t.bytes <= size,
                   "tensor " + t.name + " past the buffer");
    VQ_FUZZ_ASSERT(
        static_cast<uint64_t>(t.numel()) * static_cast<uint64_t>(vq::st_dtype_size(t.dtype)) ==
            t.bytes,
        "tensor " + t.name + " size disagrees with its shape");
    const std::vector<float> v = f.to_float(t);
    VQ_FUZZ_ASSERT(static_cast<int64_t>(v.size()) == t.numel(), "to_float size");
  }
  return 0;
}

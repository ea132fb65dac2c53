// Fuzz target: the .vqcal calibration reader, vq::Calibration::parse.
// Invariants: parse succeeds or throws vq::Error; an accepted file re-serializes to exactly the
// same bytes, its id is the stored checksum, and every (layer, head, kv) maps to an entry whose
// arrays have the sizes head_dim implies.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_util.hpp"
#include "veloxquant/calibration.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vq::Calibration c;
  if (!vq::fuzz::refused_cleanly([&] { c = vq::Calibration::parse(data, size); })) return 0;
  std::vector<uint8_t> again;
  if (!vq::fuzz::refused_cleanly([&] { again = c.serialize(); })) {
    vq::fuzz::fail("an accepted calibration cannot be serialized");
  }
  VQ_FUZZ_ASSERT(again.size() == size && std::equal(again.begin(), again.end(), data),
                 "serialize(parse(bytes)) differs from the bytes");
  uint64_t stored = 0;
  for (int i = 7; i >= 0; --i) stored = (stored << 8) | data[size - 8 + static_cast<size_t>(i)];
  VQ_FUZZ_ASSERT(c.id() == stored, "id is not the stored checksum");
  const size_t D = static_cast<size_t>(c.head_dim);
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (int64_t h = 0; h < c.n_kv_heads; ++h)
      for (int kv = 0; kv < 2; ++kv) {
        const vq::CalibrationEntry& e = c.entry(l, h, kv);
        VQ_FUZZ_ASSERT(e.mean.size() == D && e.basis.size() == D * D &&
                           e.dist_range.size() == D * vq::kCalibWidths,
                       "entry array sizes");
      }
  return 0;
}

// Fuzz target: the .vqkv reader and decoder (vq::vqkv_parse, vq::vqkv_decompress).
// Two passes over the same bytes: with every check (header and section checksums), then with
// section checksums off, so mutated section bytes reach the codec decoders behind them.
// Invariants: both succeed or throw vq::Error; an accepted index has sections that lie inside the
// file; a decoded array has exactly header.numel() values.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.hpp"
#include "veloxquant/vqkv.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vq::VqkvReadOptions opts;
  opts.max_values = int64_t{1} << 20;  // keep each run small; larger files are refused by size
  vq::VqkvIndex idx;
  if (vq::fuzz::refused_cleanly([&] { idx = vq::vqkv_parse(data, size, opts); })) {
    VQ_FUZZ_ASSERT(idx.file_bytes == size, "index file size differs from the input size");
    for (const vq::VqkvSection& s : idx.sections) {
      VQ_FUZZ_ASSERT(s.offset <= size && s.size <= size - s.offset, "section outside the file");
    }
  }
  for (bool verify : {true, false}) {
    opts.verify_sections = verify;
    vq::VqkvArray a;
    if (!vq::fuzz::refused_cleanly([&] { a = vq::vqkv_decompress(data, size, opts); })) continue;
    VQ_FUZZ_ASSERT(static_cast<int64_t>(a.values.size()) == a.header.numel(),
                   "decoded value count differs from the header");
  }
  return 0;
}

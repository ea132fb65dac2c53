// Fuzz target: the method spec-string parser, vq::CacheConfig::parse.
// Invariants: parse either succeeds or throws vq::Error; a parsed config prints to a canonical
// string that parses back to an equal config and prints identically (a fixed point).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.hpp"
#include "veloxquant/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view spec(reinterpret_cast<const char*>(data), size);
  vq::CacheConfig cfg;
  if (!vq::fuzz::refused_cleanly([&] { cfg = vq::CacheConfig::parse(spec); })) return 0;
  const std::string canon = cfg.to_string();
  vq::CacheConfig again;
  if (!vq::fuzz::refused_cleanly([&] { again = vq::CacheConfig::parse(canon); })) {
    vq::fuzz::fail("canonical string '" + canon + "' of an accepted spec does not parse");
  }
  VQ_FUZZ_ASSERT(again == cfg, "parse(to_string()) differs for '" + canon + "'");
  VQ_FUZZ_ASSERT(again.to_string() == canon, "to_string is not a fixed point for '" + canon + "'");
  // The all-options form must parse too (it is what .vqkv headers store).
  const std::string all = cfg.to_string(true);
  if (!vq::fuzz::refused_cleanly([&] { (void)vq::CacheConfig::parse(all); })) {
    vq::fuzz::fail("to_string(true) form '" + all + "' does not parse");
  }
  return 0;
}

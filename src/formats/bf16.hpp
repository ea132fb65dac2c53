// bfloat16 -> float for the model readers (the top 16 bits of an IEEE binary32; exact).
#pragma once

#include <cstdint>
#include <cstring>

namespace vq::formats {

inline float bf16_bits_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace vq::formats

// Test helper: valid stored-type data for any supported ggml type. Float types hold the values
// rounded to that type; block types hold random codes with their fp16 scale (and min) fields set
// to small positive values, so every block decodes to finite weights of a chosen magnitude.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "formats/file_writers.hpp"
#include "veloxquant/gguf.hpp"
#include "veloxquant/tensor.hpp"

namespace vqtest {

/// `n` values (a multiple of the type's block) of typical size `mag`, deterministic in `seed`.
inline Bytes random_stored(vq::GgmlType t, int64_t n, uint64_t seed, float mag = 0.1f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, mag);
  std::uniform_real_distribution<float> unif(0.5f, 1.5f);
  const int64_t bv = vq::ggml_block_values(t), bb = vq::ggml_block_bytes(t);
  Bytes out(static_cast<size_t>(n / bv * bb));
  auto put16 = [&](size_t at, uint16_t h) { std::memcpy(out.data() + at, &h, 2); };
  if (t == vq::GgmlType::F32) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = normal(rng);
      std::memcpy(out.data() + 4 * i, &v, 4);
    }
    return out;
  }
  if (t == vq::GgmlType::F16 || t == vq::GgmlType::BF16) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = normal(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      put16(static_cast<size_t>(2 * i),
            t == vq::GgmlType::F16 ? vq::fp32_to_fp16(v) : static_cast<uint16_t>(bits >> 16));
    }
    return out;
  }
  for (auto& b : out) b = static_cast<uint8_t>(rng() & 0xFF);
  // Scale for codes of about `span` levels either side of zero: values near +-mag.
  auto scale = [&](float span) { return vq::fp32_to_fp16(mag / span * unif(rng)); };
  for (int64_t blk = 0; blk < n / bv; ++blk) {
    const size_t o = static_cast<size_t>(blk * bb);
    switch (t) {
      case vq::GgmlType::Q8_0:
        put16(o, scale(64.0f));
        break;
      case vq::GgmlType::Q4_0:
      case vq::GgmlType::Q5_0:
        put16(o, scale(t == vq::GgmlType::Q4_0 ? 4.0f : 8.0f));
        break;
      case vq::GgmlType::Q4_1:
      case vq::GgmlType::Q5_1:
        put16(o, scale(t == vq::GgmlType::Q4_1 ? 4.0f : 8.0f));
        put16(o + 2, vq::fp32_to_fp16(-mag * 1.5f * unif(rng)));  // the min (added)
        break;
      case vq::GgmlType::Q4_K:
      case vq::GgmlType::Q5_K:
        put16(o, scale(t == vq::GgmlType::Q4_K ? 8.0f * 32 : 16.0f * 32));  // d * 6-bit scale
        put16(o + 2, scale(32.0f * 1.0f / 1.5f));                           // dmin * 6-bit min
        break;
      case vq::GgmlType::Q6_K:
        put16(o + 208, scale(16.0f * 64));  // d * int8 scale * (q - 32)
        break;
      default:
        break;
    }
  }
  return out;
}

}  // namespace vqtest

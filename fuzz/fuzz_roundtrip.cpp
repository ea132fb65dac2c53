// Fuzz target: codec round trip on arbitrary shapes and values (kvtc and q8_0).
//
// Input: byte 0 selects the method and options, byte 1 = H (1..4), byte 2 = S (0..63),
// byte 3 = D (1..32), byte 4 = exponent e of the value scale 2^(e % 24 - 12), byte 5 = non-finite
// injection (0..2: a NaN / +Inf / -Inf at a position given by byte 6; otherwise none), then int16
// pairs giving the values (value = int16 / 256 * scale; missing bytes read as 0).
//
// Checks, for x [H, S, D]:
//   - non-finite input is refused with vq::InvalidArgument (never encoded);
//   - encode(x) twice gives byte-identical sections (determinism), and each section's byte
//     breakdown adds up to its size;
//   - decode(encode(x)) stays within the method's stated error:
//       q8_0 (blocks of 32 values, or the block=16 / block=8 variants, inside each head's row;
//         a head_dim none of them divides is refused; scale d = amax / 127 stored as fp16):
//         |x - x_hat| <= 0.5 * d * (1 + 2^-10) + 127 * |d - fp16(d)| + 2^-24 * 128 per value,
//         bounded here by 0.51 * amax_row / 127 + 127 * amax_row / 127 * 2^-11 + 1e-5, with
//         amax_row the largest |x| of the token's row in that head (a block never leaves it);
//       kvtc at 8 bits for every component (bit_budget = 8 D, bit_choices = 0,8): each latent is
//         quantized by a min/max quantizer with 255 steps, and |latent| <= R = max_t ||x_t -
//         mean||, so the per-token L2 error is <= sqrt(D) * 2R / 510 (plus fp32 slack 1e-4 (R +
//         max|x|));
//       kvtc at its default budget (lossy, components may get 0 bits): decoded tokens keep
//         ||x_hat_t - mean|| <= sqrt(D) * R, so the per-token error is <= (1 + sqrt(D)) R + slack.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "veloxquant/codec.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/errors.hpp"

namespace {

uint8_t byte_at(const uint8_t* data, size_t size, size_t i) {
  return i < size ? data[i] : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t sel = byte_at(data, size, 0) % 3;
  const int64_t H = 1 + byte_at(data, size, 1) % 4;
  const int64_t S = byte_at(data, size, 2) % 64;
  const int64_t D = 1 + byte_at(data, size, 3) % 32;
  const float scale = std::ldexp(1.0f, byte_at(data, size, 4) % 24 - 12);
  const uint8_t inject = byte_at(data, size, 5);
  const size_t n = static_cast<size_t>(H * S * D);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t o = 7 + 2 * i;
    const auto v = static_cast<int16_t>(byte_at(data, size, o) | (byte_at(data, size, o + 1) << 8));
    x[i] = static_cast<float>(v) / 256.0f * scale;
  }

  std::string spec;
  enum class Bound { Q8, KvtcFull, KvtcLossy } bound;
  if (sel == 0) {
    if (D % 8 != 0) {  // no block size tiles the head: refused, naming head_dim
      try {
        (void)vq::make_codec("q8_0:block=8", D);
      } catch (const vq::InvalidArgument& e) {
        VQ_FUZZ_ASSERT(std::string(e.what()).find("head_dim") != std::string::npos,
                       "q8_0 refusal does not name head_dim");
        return 0;
      }
      vq::fuzz::fail("q8_0:block=8 accepted head_dim " + std::to_string(D));
    }
    spec = D % 32 == 0 ? "q8_0" : D % 16 == 0 ? "q8_0:block=16" : "q8_0:block=8";
    bound = Bound::Q8;
  } else if (sel == 1) {
    spec = "kvtc:bit_budget=" + std::to_string(8 * D) + ",bit_choices=0,8,chunk_tokens=16";
    bound = Bound::KvtcFull;
  } else {
    spec = "kvtc:chunk_tokens=32";
    bound = Bound::KvtcLossy;
  }
  const std::unique_ptr<vq::BlockCodec> codec = vq::make_codec(spec, D);

  if (inject < 3 && n > 0) {
    const float bad[3] = {std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
    x[byte_at(data, size, 6) % n] = bad[inject];
    try {
      (void)codec->encode(x.data(), H, S);
    } catch (const vq::InvalidArgument&) {
      return 0;
    } catch (const std::exception& e) {
      vq::fuzz::fail(std::string("non-finite input: wrong exception type: ") + e.what());
    }
    vq::fuzz::fail(spec + ": non-finite input was encoded instead of refused");
  }

  vq::EncodedBlock a, b;
  if (!vq::fuzz::refused_cleanly([&] { a = codec->encode(x.data(), H, S); })) {
    vq::fuzz::fail(spec + ": encode refused finite input");
  }
  b = codec->encode(x.data(), H, S);
  VQ_FUZZ_ASSERT(a.sections.size() == b.sections.size(), spec);
  for (size_t i = 0; i < a.sections.size(); ++i) {
    VQ_FUZZ_ASSERT(a.sections[i].bytes == b.sections[i].bytes,
                   spec + ": encode is not deterministic");
    VQ_FUZZ_ASSERT(
        a.sections[i].breakdown.total() == static_cast<int64_t>(a.sections[i].bytes.size()),
        spec + ": byte breakdown does not add up");
  }
  std::vector<float> y(n, std::numeric_limits<float>::quiet_NaN());
  if (!vq::fuzz::refused_cleanly([&] { codec->decode(a, y.data()); })) {
    vq::fuzz::fail(spec + ": its own encoding does not decode");
  }

  for (int64_t h = 0; h < H; ++h) {
    const float* xh = x.data() + h * S * D;
    const float* yh = y.data() + h * S * D;
    // Mean, R = max_t ||x_t - mean|| and max |x| of this head.
    std::vector<double> mean(static_cast<size_t>(D), 0.0);
    double amax = 0;
    for (int64_t t = 0; t < S; ++t) {
      for (int64_t d = 0; d < D; ++d) {
        mean[d] += xh[t * D + d];
        amax = std::max(amax, std::fabs(static_cast<double>(xh[t * D + d])));
      }
    }
    for (double& m : mean) m /= std::max<int64_t>(S, 1);
    double R = 0;
    for (int64_t t = 0; t < S; ++t) {
      double r2 = 0;
      for (int64_t d = 0; d < D; ++d) r2 += (xh[t * D + d] - mean[d]) * (xh[t * D + d] - mean[d]);
      R = std::max(R, std::sqrt(r2));
    }
    for (int64_t t = 0; t < S; ++t) {
      double e2 = 0, emax = 0;
      for (int64_t d = 0; d < D; ++d) {
        VQ_FUZZ_ASSERT(std::isfinite(yh[t * D + d]), spec + ": decoded a non-finite value");
        const double e = std::fabs(static_cast<double>(xh[t * D + d]) - yh[t * D + d]);
        e2 += e * e;
        emax = std::max(emax, e);
      }
      if (bound == Bound::Q8) {
        // Blocks lie inside the head: the row's amax in this head bounds every block's amax.
        double row_amax = 0;
        for (int64_t d = 0; d < D; ++d)
          row_amax = std::max(row_amax, std::fabs(static_cast<double>(xh[t * D + d])));
        const double lim = 0.51 * row_amax / 127 + row_amax * std::ldexp(1.0, -11) + 1e-5;
        VQ_FUZZ_ASSERT(emax <= lim,
                       spec + ": error " + std::to_string(emax) + " > " + std::to_string(lim));
      } else {
        const double slack = 1e-4 * (R + amax) + 1e-6;
        const double lim = bound == Bound::KvtcFull
                               ? std::sqrt(static_cast<double>(D)) * 2 * R / 510 + slack
                               : (1 + std::sqrt(static_cast<double>(D))) * R + slack;
        VQ_FUZZ_ASSERT(
            std::sqrt(e2) <= lim,
            spec + ": token error " + std::to_string(std::sqrt(e2)) + " > " + std::to_string(lim));
      }
    }
  }
  return 0;
}

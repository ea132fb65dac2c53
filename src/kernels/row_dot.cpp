// Fused row dot products (see row_dot.hpp). Block layouts: src/formats/ggml_types.cpp.
#include "kernels/row_dot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "formats/bf16.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/gguf.hpp"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define VQ_ROW_DOT_AVX2 1
#include <immintrin.h>
#endif

namespace vq::kernels::detail {

namespace {

// Where block j (0-7) of a Q4_K / Q5_K super-block's levels sits in RowDotInput::q8, in values
// from the super-block's start: 0, 2, 1, 3 then 4, 6, 5, 7.
constexpr int64_t k_level_offset(int64_t j) {
  return 128 * (j / 4) + 64 * (j % 2) + 32 * ((j % 4) / 2);
}

}  // namespace

#if defined(VQ_ROW_DOT_AVX2)
namespace {

// Sum of the 8 lanes in a fixed order.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline uint16_t rd16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
inline float half_at(const uint8_t* p) {
  return _cvtsh_ss(rd16(p));
}
inline __m256 ld(const float* p) {
  return _mm256_loadu_ps(p);
}
inline __m256i ld16(const int16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline __m128i ld128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
inline __m256i ld256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Each kernel asks for the weight bytes kPrefetchAhead past the ones it is reading: one request
// per step of the row loop, or one per 64-byte line where a step reads several (a K-quant
// super-block); the 32-value block types step over 36-68 bytes, so a line is now and then left to
// the hardware prefetcher (a second request per Q8_0 step measured no different). The hardware
// prefetchers alone kept up with 2048-value BF16 rows (4 KB) but not with longer ones: a
// standalone BF16 row loop, one thread, 2048 x 8192 gave 12-19 GB/s against 33 GB/s for 8192 x
// 2048 (same bytes, sequential either way); with the request 4 KB ahead 27 GB/s, 8 KB 30-32 GB/s,
// 16 KB 26 GB/s, and 16384 x 8192 (256 MB) 16.4 -> 21-24 GB/s. In the library, two threads,
// `bench kernels --rows 16384 --cols 8192 --batch 1`, old and new binaries interleaved: BF16
// 7.9-8.5 -> 5.0-5.8 ms, Q8_0 4.9-5.1 -> 2.5 ms, Q4_K 2.9-3.1 -> 1.9-2.3 ms; 65536 x 2048 the same
// or faster. A matrix the L3 cache holds between repeats (8192 x 2048 Q8_0, 17 MB) runs up to 15%
// slower for the extra instructions; in decode no matrix is cache-resident (the model is read
// whole per token), and `bench engine` decode gained (session 16). The address is formed as an
// integer: past the matrix's end it names memory the product never reads, and a prefetch never
// faults.
constexpr uintptr_t kPrefetchAhead = 8192;
// A matrix smaller than this is taken to stay in the caches between products (a small model's
// weights), where the requests only cost instructions (one thread, 256 x 2048 repeated from L2:
// Q8_0 14.7 -> 16.3 µs, BF16 27.8 -> 32.7 µs with them); its kernels make none. The 1B shape's
// smallest matrix (512 x 2048 Q4_K, 576 KiB) is above it.
constexpr uint64_t kPrefetchMinBytes = 512 * 1024;
template <bool Pf>
inline void prefetch_ahead(const uint8_t* p) {
  if constexpr (Pf)
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + kPrefetchAhead),
                 _MM_HINT_T0);
}

// Every kernel is written for R rows at once (K::run<R>: the rows would share each load of the
// input), each row with its own accumulators and exactly the operations of run<1>, so a row's
// result does not depend on its group. Measured on 16384 x 8192 matrices (one thread, this
// machine), groups were slower: Q8_0 5.1 ms at R = 1, 11.3 ms at R = 2, 8.8 ms at R = 4; F16 and
// BF16 12.6 / 13.5 ms at R = 1, 14.3 / 15.1 ms at R = 2. So kRows is 1 for every type; the
// template stays for the next machine to measure.

// F16: 8 values per 16 bytes widened by F16C; four accumulators over 32 values per step.
inline __m256 half8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
struct F16Rows {
  static constexpr int kRows = 1;
  template <int R, bool Pf>
  static void run(const uint8_t* w, uint64_t rb, const RowDotInput& in, float* out) {
    const float* x = in.x;
    const int64_t n = in.cols;
    __m256 a[R][4];
    for (auto& ar : a)
      for (auto& v : ar) v = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m256 x0 = ld(x + i), x1 = ld(x + i + 8), x2 = ld(x + i + 16), x3 = ld(x + i + 24);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w + r * rb + 2 * i;
        prefetch_ahead<Pf>(p);
        a[r][0] = _mm256_fmadd_ps(half8(p), x0, a[r][0]);
        a[r][1] = _mm256_fmadd_ps(half8(p + 16), x1, a[r][1]);
        a[r][2] = _mm256_fmadd_ps(half8(p + 32), x2, a[r][2]);
        a[r][3] = _mm256_fmadd_ps(half8(p + 48), x3, a[r][3]);
      }
    }
    for (; i + 8 <= n; i += 8)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        a[r][0] = _mm256_fmadd_ps(half8(w + r * rb + 2 * i), ld(x + i), a[r][0]);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float s =
          hsum(_mm256_add_ps(_mm256_add_ps(a[r][0], a[r][1]), _mm256_add_ps(a[r][2], a[r][3])));
      for (int64_t j = i; j < n; ++j) s += _cvtsh_ss(rd16(w + r * rb + 2 * j)) * x[j];
      out[r] = s;
    }
  }
};

// BF16 without widening: a 32-bit lane of 16 weights' bytes holds weights 2i (low half) and
// 2i + 1 (high half); shifting left by 16 gives the first as a float, masking the low half the
// second. The input is de-interleaved once per product to match (RowDotInput::split: per 16
// values, the 8 even then the 8 odd ones). Four accumulators over 32 values per step.
struct Bf16Rows {
  static constexpr int kRows = 1;
  template <int R, bool Pf>
  static void run(const uint8_t* w, uint64_t rb, const RowDotInput& in, float* out) {
    const int64_t n = in.cols, chunks = n / 16;
    const float* xs = in.split.data();
    const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    const auto even = [](__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); };
    const auto odd = [&](__m256i v) { return _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask)); };
    __m256 a[R][4];
    for (auto& ar : a)
      for (auto& v : ar) v = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 2 <= chunks; c += 2) {
      const __m256 x0 = ld(xs + 16 * c), x1 = ld(xs + 16 * c + 8), x2 = ld(xs + 16 * c + 16),
                   x3 = ld(xs + 16 * c + 24);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w + r * rb + 32 * c;
        prefetch_ahead<Pf>(p);
        const __m256i v0 = ld256(p), v1 = ld256(p + 32);
        a[r][0] = _mm256_fmadd_ps(even(v0), x0, a[r][0]);
        a[r][1] = _mm256_fmadd_ps(odd(v0), x1, a[r][1]);
        a[r][2] = _mm256_fmadd_ps(even(v1), x2, a[r][2]);
        a[r][3] = _mm256_fmadd_ps(odd(v1), x3, a[r][3]);
      }
    }
    if (c < chunks)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256i v0 = ld256(w + r * rb + 32 * c);
        a[r][0] = _mm256_fmadd_ps(even(v0), ld(xs + 16 * c), a[r][0]);
        a[r][1] = _mm256_fmadd_ps(odd(v0), ld(xs + 16 * c + 8), a[r][1]);
      }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float s =
          hsum(_mm256_add_ps(_mm256_add_ps(a[r][0], a[r][1]), _mm256_add_ps(a[r][2], a[r][3])));
      for (int64_t i = 16 * chunks; i < n; ++i)
        s += formats::bf16_bits_to_float(rd16(w + r * rb + 2 * i)) * in.x[i];
      out[r] = s;
    }
  }
};

// The block-quantized types multiply integers: the input's 32-value block b is held as int16
// q (|q| <= 32767) with x ~= scale[b] * q, and a weight block's integer codes meet q in
// _mm256_madd_epi16 (pairs of int16 products summed into int32 lanes). Every lane sum stays
// below 2^24 (at most 4 products of |code| <= 128 and |q| <= 32767), so the integer sums are
// exact, and so is their conversion to float; the only rounding beyond fp32 summation is q's (at
// most half of scale[b] per input value).
inline __m256i madd8(__m128i codes, __m256i q) {  // 16 signed 8-bit codes times 16 levels
  return _mm256_madd_epi16(_mm256_cvtepi8_epi16(codes), q);
}

// Byte j of the result is 0xFF where bit j of the little-endian 32-bit word at p is set, 0
// elsewhere: the word is broadcast, each byte lane picks the word's byte j / 8 and keeps bit j % 8.
inline __m256i bit_bytes(const uint8_t* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  const __m256i pick = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                          0x0303030303030303);  // byte j / 8 of each 128-bit lane
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(u)), pick);
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// The 32-value block types (layouts in src/formats/ggml_types.cpp), all with the fp16 d first:
// Q8_0 (34 B): int8 codes; one exact integer block sum, scaled by d * scale[b] into one of two
//   accumulators (even / odd blocks).
// Q4_0 (18 B): byte j's low nibble is value j, its high nibble value j + 16, each minus 8;
//   otherwise as Q8_0.
// Q4_1 (20 B): fp16 m after d, then nibbles as Q4_0 but unsigned (0..15), and weight =
//   d * code + m. The m part of a block's product is m * scale[b] * qsum[b] (qsum: the sum of
//   the block's input levels), kept in two scalar accumulators (even / odd blocks) added at the
//   end.
// Q5_0 (22 B): 32 bits qh after d (bit j: the 5th bit of value j), then nibbles; code =
//   (nibble | bit << 4) - 16. The 32 nibbles are laid out as one 256-bit vector of bytes in value
//   order, so that qh's bits (spread to bytes by bit_bytes) line up with them.
// Q5_1 (24 B): d, m, qh, nibbles; code = nibble | bit << 4 (0..31), weight = d * code + m.
// Every lane of the int32 sums adds 4 products of |code| <= 31 and |q| <= 32767: exact.
enum class Block32 { Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 };

template <Block32 T>
struct Block32Rows {
  static constexpr int kRows = 1;
  static constexpr bool kMin = T == Block32::Q4_1 || T == Block32::Q5_1;   // adds m per block
  static constexpr bool kFive = T == Block32::Q5_0 || T == Block32::Q5_1;  // has qh
  // Offset of the codes (int8 for Q8_0, nibbles otherwise) and the block's size.
  static constexpr int64_t kCodes = 2 + (kMin ? 2 : 0) + (kFive ? 4 : 0);
  static constexpr int64_t kBytes = T == Block32::Q8_0 ? 34 : kCodes + 16;
  // The block's exact integer sum against levels x0 (values 0-15) and x1 (16-31).
  static __m256i isum(const uint8_t* p, __m256i x0, __m256i x1) {
    if constexpr (T == Block32::Q8_0) {
      return _mm256_add_epi32(madd8(ld128(p + 2), x0), madd8(ld128(p + 18), x1));
    } else if constexpr (!kFive) {
      const __m128i m4 = _mm_set1_epi8(0x0F);
      const __m128i raw = ld128(p + kCodes);
      __m128i lo = _mm_and_si128(raw, m4);
      __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), m4);
      if constexpr (T == Block32::Q4_0) {
        const __m128i k8 = _mm_set1_epi8(8);
        lo = _mm_sub_epi8(lo, k8);
        hi = _mm_sub_epi8(hi, k8);
      }
      return _mm256_add_epi32(madd8(lo, x0), madd8(hi, x1));
    } else {
      const __m256i codes = codes32(p);
      return _mm256_add_epi32(madd8(_mm256_castsi256_si128(codes), x0),
                              madd8(_mm256_extracti128_si256(codes, 1), x1));
    }
  }
  // Q8_0 / Q4_1 / Q5_0 / Q5_1: the block's 32 codes as bytes in value order.
  static __m256i codes32(const uint8_t* p) {
    if constexpr (T == Block32::Q8_0) return ld256(p + 2);  // the int8 codes as they are
    const __m128i raw = ld128(p + kCodes);
    const __m256i nib = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(raw), _mm_srli_epi16(raw, 4), 1),
        _mm256_set1_epi8(0x0F));
    if constexpr (!kFive) {
      return nib;
    } else {
      const __m256i k16 = _mm256_set1_epi8(16);
      const __m256i high = bit_bytes(p + kCodes - 4);
      // Q5_0: 16 less where the bit is clear, so (nibble | bit << 4) - 16; Q5_1: 16 more where set.
      return T == Block32::Q5_0 ? _mm256_sub_epi8(nib, _mm256_andnot_si256(high, k16))
                                : _mm256_or_si256(nib, _mm256_and_si256(high, k16));
    }
  }
  template <int R, bool Pf>
  static void run(const uint8_t* w, uint64_t rb, const RowDotInput& in, float* out) {
    const int64_t nb = in.cols / 32;
    const int16_t* q = in.q.data();
    const float* xs = in.scale.data();
    const int32_t* qs = in.qsum.data();
    __m256 a[R][2];
    float mins[R][2];
    for (int r = 0; r < R; ++r) {
      a[r][0] = a[r][1] = _mm256_setzero_ps();
      mins[r][0] = mins[r][1] = 0.0f;
    }
    const auto block = [&](const uint8_t* row, int64_t b, __m256i x0, __m256i x1, __m256& acc,
                           float& mn) {
      const uint8_t* p = row + kBytes * b;
      acc = _mm256_fmadd_ps(_mm256_set1_ps(half_at(p) * xs[b]), _mm256_cvtepi32_ps(isum(p, x0, x1)),
                            acc);
      if constexpr (kMin) mn += half_at(p + 2) * (xs[b] * static_cast<float>(qs[b]));
    };
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      const __m256i x0 = ld16(q + 32 * b), x1 = ld16(q + 32 * b + 16), x2 = ld16(q + 32 * b + 32),
                    x3 = ld16(q + 32 * b + 48);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        prefetch_ahead<Pf>(w + r * rb + kBytes * b);
        block(w + r * rb, b, x0, x1, a[r][0], mins[r][0]);
        block(w + r * rb, b + 1, x2, x3, a[r][1], mins[r][1]);
      }
    }
    if (b < nb)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        block(w + r * rb, b, ld16(q + 32 * b), ld16(q + 32 * b + 16), a[r][0], mins[r][0]);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      out[r] = hsum(_mm256_add_ps(a[r][0], a[r][1]));
      if constexpr (kMin) out[r] += mins[r][0] + mins[r][1];
    }
  }
};

#if defined(__AVX512F__) && defined(__AVX512BW__)
// start + the sums of each 4 byte products codes[4i..4i+3] * x[4i..4i+3] (unsigned codes, signed
// levels) into int32 lane i: VNNI's dpbusd, or maddubs (pairs into int16, at most 2 * 63 * 127
// here) and madd with ones.
inline __m512i dot_u8i8(__m512i start, __m512i codes, __m512i x) {
#if defined(__AVX512VNNI__)
  return _mm512_dpbusd_epi32(start, codes, x);
#else
  return _mm512_add_epi32(start,
                          _mm512_madd_epi16(_mm512_maddubs_epi16(codes, x), _mm512_set1_epi16(1)));
#endif
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)
#if defined(__AVX512VBMI__)
// The fp16 d of the 16 Q8_0 blocks (34 bytes each) from p0, as 16 floats: four 128-byte windows,
// each holding four blocks' d at bytes 0, 34, 68 and 102, whose bytes one vpermt2b picks. The
// windows end at byte 535 of the 544.
inline __m512 q8_0_d16(const uint8_t* p0) {
  const __m512i pick = _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, 0x6766454423220100LL);
  __m128i d4[4];
  for (int g = 0; g < 4; ++g) {
    const uint8_t* p = p0 + 136 * g;
    d4[g] = _mm512_castsi512_si128(
        _mm512_permutex2var_epi8(_mm512_loadu_si512(p), pick, _mm512_loadu_si512(p + 64)));
  }
  return _mm512_cvtph_ps(
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi64(d4[0], d4[1])),
                              _mm_unpacklo_epi64(d4[2], d4[3]), 1));
}
#endif

// Q8_0 with 512-bit vectors on int16 levels, where the build has AVX-512 BW (since
// session 15: one 32-byte load of the codes, one widening and one madd per block instead of two
// each; Q8_0 2048 x 8192, one thread, interleaved with the 256-bit kernel: 20.3-21.4 -> 23.7-24.5
// GB/s; 2048-column rows the same within noise; Q4_1 / Q5_0 / Q5_1 took it too until session 20).
// Q8_0 stays on int16 levels: on int8 ones (Block32ByteRows512's scheme, codes + 128) it was no
// faster (512 x 2048, one thread, interleaved: 23.5-24.1 µs here, 27.8-28.4 there), and int16
// levels round the input 256 times finer. A block's 32 codes
// (Block32Rows::codes32) widened to int16 at once and multiplied with its 32 levels in one
// _mm512_madd_epi16 (16 int32 lanes, each 2 products: exact), converted and scaled into one of
// two 16-lane accumulators (even / odd blocks); the min terms as in Block32Rows.
template <Block32 T>
struct Block32Rows512 {
  using B = Block32Rows<T>;
  static constexpr int kRows = 1;
  template <int R, bool Pf>
  static void run(const uint8_t* w, uint64_t, const RowDotInput& in, float* out) {
    static_assert(R == 1, "one row at a time");
    const int64_t nb = in.cols / 32;
    const int16_t* q = in.q.data();
    const float* xs = in.scale.data();
    const int32_t* qs = in.qsum.data();
    __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    float mins[2] = {0.0f, 0.0f};
    // block b's exact integer sum, scaled by its factor d * scale[b] into acc
    const auto product = [&](int64_t b, float factor, __m512& acc) {
      const __m512i s = _mm512_madd_epi16(_mm512_cvtepi8_epi16(B::codes32(w + B::kBytes * b)),
                                          _mm512_loadu_si512(q + 32 * b));
      acc = _mm512_fmadd_ps(_mm512_set1_ps(factor), _mm512_cvtepi32_ps(s), acc);
    };
    const auto block = [&](int64_t b, __m512& acc, float& mn) {
      const uint8_t* p = w + B::kBytes * b;
      product(b, half_at(p) * xs[b], acc);
      if constexpr (B::kMin) mn += half_at(p + 2) * (xs[b] * static_cast<float>(qs[b]));
    };
    int64_t b = 0;
#if defined(__AVX512VBMI__)
    if constexpr (T == Block32::Q8_0) {
      // 16 blocks at a time with their factors d * scale[b] formed as one vector (q8_0_d16),
      // stored and taken back one by one as broadcasts from memory: no scalar fp16 conversion,
      // multiply and register broadcast per block. Each factor is the same float product, and
      // every block meets the same accumulator in the same order, so the bits are those of the
      // loop below. 256 x 2048 from L2, one thread, against it: 0.85-0.97 -> 0.73-0.85 ns a
      // block (session 32, results/session32/q8_kernel.cpp).
      alignas(64) float f[16];
      for (; b + 16 <= nb; b += 16) {
        const uint8_t* p0 = w + B::kBytes * b;
        _mm512_store_ps(f, _mm512_mul_ps(q8_0_d16(p0), _mm512_loadu_ps(xs + b)));
#pragma GCC unroll 16
        for (int k = 0; k < 16; ++k) {
          if (k % 2 == 0) prefetch_ahead<Pf>(p0 + B::kBytes * k);
          product(b + k, f[k], a[k % 2]);
        }
      }
    }
#endif
    for (; b + 2 <= nb; b += 2) {
      prefetch_ahead<Pf>(w + B::kBytes * b);
      block(b, a[0], mins[0]);
      block(b + 1, a[1], mins[1]);
    }
    if (b < nb) block(b, a[0], mins[0]);
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, _mm512_add_ps(a[0], a[1]));
    out[0] = hsum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8)));
    if constexpr (B::kMin) out[0] += mins[0] + mins[1];
  }
};
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__BMI2__)
#define VQ_ROW_DOT_BLOCK32_BYTES 1
// Q4_0 / Q4_1 / Q5_0 / Q5_1 with 512-bit vectors on int8 input levels (RowDotInput::q8, |q| <=
// 127), where the build has AVX-512 BW: a pair of blocks (64 values) per step, the 4- and 5-bit
// codes meeting the levels in byte products (VNNI's dpbusd, or maddubs + madd) as the K-quants do,
// instead of being widened to int16. dpbusd multiplies unsigned bytes with signed ones, so the
// codes are taken as stored (0..15, 0..31); Q4_0's 8 and Q5_0's 16 taken off every code are the
// level sum times that, the int32 lane's starting value (RowDotInput::offset4), so every lane is an
// exact sum of 4 products code * level. The two blocks' 4-byte groups alternate over the lanes
// (lane 2i: group i of the first block, 2i + 1 of the second; the low nibbles' groups, then the
// high ones'), and the levels are stored in that order, so one broadcast 32-bit word holding both
// blocks' fp16 d (or m) converts to the lanes' factors; times the input scale of each lane's block
// (RowDotInput::lane_scale) they scale the lanes into one of two accumulators. Q4_1's / Q5_1's
// added m meets the level sums the same way (RowDotInput::lane_min: scale * sum / 8 per lane of a
// block). A row with an odd number of blocks ends on a pair whose second block is zeros (zero
// levels, zero scale). Q5's fifth bits (qh, bit j for value j) are deposited on the codes' byte
// order as a 64-bit mask (pdep). 512 x 2048 from L2, one thread, interleaved with the int16
// kernels: Q4_0 43.1-43.5 -> 28.0-28.1 µs, Q4_1 43.2-43.7 -> 34.6-35.9, Q5_0 45.9-46.3 ->
// 35.4-35.6, Q5_1 54.1-54.7 -> 40.1-41.4 (session 20); the input rounding is then 1/254 of the
// block's largest value instead of 2^-16, as for the K-quants.
template <Block32 T>
struct Block32ByteRows512 {
  static_assert(T != Block32::Q8_0, "Q8_0 stays on int16 levels (Block32Rows512)");
  using B = Block32Rows<T>;
  static constexpr int kRows = 1;
  static uint32_t qh_of(const uint8_t* p) {
    uint32_t h;
    std::memcpy(&h, p + B::kCodes - 4, 4);
    return h;
  }
  // The unsigned codes of the blocks at p and p2 (p2 null: the row's last, lone block), their
  // 4-byte groups alternating: int32 lane 2i holds group i of block p, lane 2i + 1 of block p2.
  static __m512i codes64(const uint8_t* p, const uint8_t* p2) {
    {
      const __m128i a = ld128(p + B::kCodes);
      const __m256i raw = _mm256_permutevar8x32_epi32(
          p2 ? _mm256_inserti128_si256(_mm256_castsi128_si256(a), ld128(p2 + B::kCodes), 1)
             : _mm256_zextsi128_si256(a),
          _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      __m512i z = _mm512_and_si512(
          _mm512_inserti64x4(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1),
          _mm512_set1_epi8(0x0F));
      if constexpr (B::kFive) {
        // value j of block p sits in byte 8 (j / 4) + j % 4 (j < 16) or 32 + 8 ((j - 16) / 4) +
        // j % 4: the set bits of 0x0F0F... in order; block p2's those of 0xF0F0...
        const uint64_t mask = _pdep_u64(qh_of(p), 0x0F0F0F0F0F0F0F0Full) |
                              (p2 ? _pdep_u64(qh_of(p2), 0xF0F0F0F0F0F0F0F0ull) : 0);
        z = _mm512_mask_add_epi8(z, _cvtu64_mask64(mask), z, _mm512_set1_epi8(16));
      }
      return z;
    }
  }
  // The two blocks' fp16 at offset `at` (d, or m) alternating over the 16 lanes, as floats.
  static __m512 pair_half(const uint8_t* p, const uint8_t* p2, int at) {
    const uint32_t h = rd16(p + at) | (p2 ? static_cast<uint32_t>(rd16(p2 + at)) << 16 : 0u);
    return _mm512_cvtph_ps(_mm256_set1_epi32(static_cast<int>(h)));
  }
  template <int R, bool Pf>
  static void run(const uint8_t* w, uint64_t, const RowDotInput& in, float* out) {
    static_assert(R == 1, "one row at a time");
    const int64_t nb = in.cols / 32;
    const int8_t* q = in.q8.data();
    const int32_t* o4 = in.offset4.data();
    const float* ls = in.lane_scale.data();
    const float* lm = in.lane_min.data();
    __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    __m512 mn = _mm512_setzero_ps();
    const auto pair = [&](int64_t k, const uint8_t* p, const uint8_t* p2, __m512& acc) {
      const __m512i start = B::kMin ? _mm512_setzero_si512() : _mm512_loadu_si512(o4 + 16 * k);
      const __m512i s = dot_u8i8(start, codes64(p, p2), _mm512_loadu_si512(q + 64 * k));
      const __m512 f = _mm512_mul_ps(pair_half(p, p2, 0), _mm512_loadu_ps(ls + 16 * k));
      acc = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(s), acc);
      if constexpr (B::kMin)
        mn = _mm512_fmadd_ps(pair_half(p, p2, 2), _mm512_loadu_ps(lm + 16 * k), mn);
    };
    int64_t k = 0;
    for (; 2 * k + 4 <= nb; k += 2) {
      const uint8_t* p = w + B::kBytes * 2 * k;
      prefetch_ahead<Pf>(p);
      prefetch_ahead<Pf>(p + 2 * B::kBytes);
      pair(k, p, p + B::kBytes, a[0]);
      pair(k + 1, p + 2 * B::kBytes, p + 3 * B::kBytes, a[1]);
    }
    for (; 2 * k < nb; ++k) {
      const uint8_t* p = w + B::kBytes * 2 * k;
      pair(k, p, 2 * k + 1 < nb ? p + B::kBytes : nullptr, a[0]);
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(
        lanes, B::kMin ? _mm512_add_ps(_mm512_add_ps(a[0], a[1]), mn) : _mm512_add_ps(a[0], a[1]));
    out[0] = hsum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8)));
  }
};
#endif

// A Q4_K / Q5_K super-block's eight 6-bit scales and mins (the 12 bytes at b + 4; sub-blocks 0-3
// keep theirs in the low 6 bits of bytes 0-3 / 4-7, sub-blocks 4-7 in the nibbles of bytes 8-11
// with the top 2 bits in those bytes' high bits), unpacked four bytes at a time: f[s] = d * sc_s *
// scale[i_s], and dmin * mn_s * scale[i_s] * sum(q of block i_s) added into the 8 lanes of mins. x8
// holds the super-block's eight input scales, qsf its eight input sums.
inline void k_super_block_scales(const uint8_t* b, __m256 x8, __m256 qsf, float* f, __m256& mins) {
  uint32_t u[3];
  std::memcpy(u, b + 4, 12);
  const uint64_t sc8 =
      (u[0] & 0x3f3f3f3fu) |
      static_cast<uint64_t>((u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4)) << 32;
  const uint64_t mn8 =
      (u[1] & 0x3f3f3f3fu) |
      static_cast<uint64_t>(((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4)) << 32;
  const __m256 scf =
      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(sc8))));
  const __m256 mnf =
      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(mn8))));
  _mm256_store_ps(f, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(half_at(b)), scf), x8));
  mins = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(half_at(b + 2)), mnf), x8), qsf,
                         mins);
}

// Q4_K (144 B per 256 values: fp16 d and dmin, 12 bytes of 6-bit scales and mins, 128 nibble
// bytes) and Q5_K (176 B: the same, then qh[32] before the nibbles) on int8 input levels
// (RowDotInput::q8, each super-block's blocks in the order 0, 2, 1, 3, 4, 6, 5, 7). Chunk c (32
// nibble bytes) holds sub-block 2c in its low nibbles and 2c + 1 in its high nibbles; weight =
// (d * sc) * code - dmin * mn. Q5_K's value l of sub-block s has bit s of qh[l] as its 5th bit,
// so for chunk c the low nibbles take bit 2c of each qh byte and the high nibbles bit 2c + 1,
// shifted to bit 4 (one 16-bit shift; the 0x10 mask keeps each byte's own bit) and or-ed into
// the code. The codes are unsigned (0..15, 0..31), so they meet the signed levels directly in
// byte products: per 32-value sub-block s (input block i) an exact int32 sum (at most
// 32 * 31 * 127), scaled by d * sc * scale[i] into a float accumulator, and the min term
// dmin * mn * scale[i] * sum(levels) into an 8-lane vector subtracted at the end. A
// super-block's eight scales and mins are unpacked four bytes at a time and their products with
// d, dmin and the input scales formed as 8-lane vectors (session 12: 4096 x 4096 Q4_K, one
// thread, 0.78-1.09 -> 0.58 ms in an AVX2-only build). The 256-bit kernel multiplies 32 codes at
// a time (maddubs to int16 pairs, at most 2 * 31 * 127, then madd with ones); the 512-bit one
// below takes 64 nibble bytes, two sub-blocks' codes per half, in one load.
template <bool Five>
struct KQuantRows256 {
  static constexpr int kRows = 1;
  static constexpr int64_t kBlock = Five ? 176 : 144;  // bytes per 256-value super-block
  static constexpr int64_t kNibbles = Five ? 48 : 16;  // offset of the 128 nibble bytes
  // Bit `bit` of each byte of qh moved to bit 4, every other bit cleared.
  static __m256i high_bits(__m256i qh, int bit) {
    const __m256i moved =
        bit <= 4 ? _mm256_slli_epi16(qh, 4 - bit) : _mm256_srli_epi16(qh, bit - 4);
    return _mm256_and_si256(moved, _mm256_set1_epi8(0x10));
  }
  template <int R, bool Pf>
  static void run(const uint8_t* w, uint64_t, const RowDotInput& in, float* out) {
    static_assert(R == 1, "one row at a time");
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t* q = in.q8.data();
    const float* xs = in.scale.data();
    const int32_t* qs = in.qsum.data();
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
    __m256 mins = _mm256_setzero_ps();
    alignas(32) float f[8];
    for (int64_t sb = 0; sb < in.cols / 256; ++sb) {
      const uint8_t* b = w + kBlock * sb;
      for (int64_t line = 0; line < kBlock; line += 64) prefetch_ahead<Pf>(b + line);
      const __m256 x8 = ld(xs + 8 * sb);
      const __m256 qsf =
          _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 8 * sb)));
      k_super_block_scales(b, x8, qsf, f, mins);
      const __m256i qh = Five ? ld256(b + 16) : _mm256_setzero_si256();
      const int8_t* qb = q + 256 * sb;
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m256i raw = ld256(b + kNibbles + 32 * c);
        __m256i codes[2] = {_mm256_and_si256(raw, m4),
                            _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4)};
        if constexpr (Five) {
          codes[0] = _mm256_or_si256(codes[0], high_bits(qh, 2 * c));
          codes[1] = _mm256_or_si256(codes[1], high_bits(qh, 2 * c + 1));
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m256i x =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + k_level_offset(2 * c + h)));
          const __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(codes[h], x), ones);
          const int k = (c & 1) * 2 + h;
          a[k] = _mm256_fmadd_ps(_mm256_set1_ps(f[2 * c + h]), _mm256_cvtepi32_ps(sum), a[k]);
        }
      }
    }
    out[0] = hsum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]))) - hsum(mins);
  }
};

#if defined(__AVX512F__) && defined(__AVX512BW__)
// A Q4_K / Q5_K super-block's eight 6-bit scales sc_s and mins mn_s (see k_super_block_scales)
// interleaved as 16 bytes sc_0, mn_0, sc_1, mn_1, ..., sc_7, mn_7, by two byte shuffles of the
// 12 bytes at b + 4: sc / mn 0-3 are the low 6 bits of bytes 0-3 / 4-7; sc / mn 4-7 the low /
// high nibbles of bytes 8-11 with the top 2 bits of bytes 0-3 / 4-7 above them.
inline __m128i k_scales_interleaved(const uint8_t* b) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
  // low parts: bytes s, 4 + s (s < 4), then byte 8 + (s - 4) twice (s >= 4)
  const __m128i p =
      _mm_shuffle_epi8(raw, _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 8, 9, 9, 10, 10, 11, 11));
  // mn 4-7 take the high nibble: the odd bytes of the upper half from p shifted right by 4
  const __m128i odd_high =
      _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, -128, 0, -128, 0, -128, 0, -128);
  const __m128i low =
      _mm_and_si128(_mm_blendv_epi8(p, _mm_srli_epi16(p, 4), odd_high),
                    _mm_setr_epi8(63, 63, 63, 63, 63, 63, 63, 63, 15, 15, 15, 15, 15, 15, 15, 15));
  // bits 6-7 of bytes s (sc_{4+s}) and 4 + s (mn_{4+s}) moved to bits 4-5
  const __m128i top =
      _mm_shuffle_epi8(raw, _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 1, 5, 2, 6, 3, 7));
  return _mm_or_si128(low, _mm_and_si128(_mm_srli_epi16(top, 2), _mm_set1_epi8(0x30)));
}

// Bytes 64h .. 64h + 63 of a super-block's nibbles hold sub-blocks 4h and 4h + 2 in their low
// nibbles (lanes 0-7 / 8-15 of the int32 sums) and 4h + 1, 4h + 3 in their high ones, which is
// the order of the levels; each sum is scaled by a 16-lane vector holding the two sub-blocks'
// factors, picked by a permutation from one vector of all sixteen: lane 2s d * sc_s * scale[s],
// lane 2s + 1 dmin * mn_s * scale[s] (the fp16 pair d, dmin converted as broadcast, the scales
// interleaved to match by k_scales_interleaved, and the input scales laid out so by
// RowDotInput::pair_scale; the products are k_super_block_scales', so the bits are the same).
// The min terms meet RowDotInput::pair_qsum (0 in the even lanes, the level sums in the odd
// ones) in a 16-lane accumulator whose odd lanes are summed at the end as the 8-lane one was.
// Against the factors formed as two 8-lane halves (session 32, results/session32/q4k_kernel.cpp,
// 256 x 2048 from L2, one thread): 4.13-4.17 -> 3.88-3.99 ns a super-block. Q5_K's 5th bits: qh
// and qh >> 2 side by side (bits 4h and 4h + 1 of the first half, 4h + 2 and 4h + 3 of qh in the
// second), bit 4h moved to bit 4 for the low nibbles, 4h + 1 for the high ones.
template <bool Five>
struct KQuantRows512 {
  static constexpr int kRows = 1;
  static constexpr int64_t kBlock = Five ? 176 : 144;  // bytes per 256-value super-block
  static constexpr int64_t kNibbles = Five ? 48 : 16;  // offset of the 128 nibble bytes
  static __m512i high_bits(__m512i qh, int bit) {
    const __m512i moved =
        bit <= 4 ? _mm512_slli_epi16(qh, 4 - bit) : _mm512_srli_epi16(qh, bit - 4);
    return _mm512_and_si512(moved, _mm512_set1_epi8(0x10));
  }
  template <int R, bool Pf>
  static void run(const uint8_t* w, uint64_t, const RowDotInput& in, float* out) {
    static_assert(R == 1, "one row at a time");
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    // factor lanes (d * sc of sub-block s at lane 2s): {0 x8, 2 x8}, {1 x8, 3 x8}, {4 x8, 6 x8},
    // {5 x8, 7 x8}
    const __m512i pick[4] = {
        _mm512_set_epi32(4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_set_epi32(6, 6, 6, 6, 6, 6, 6, 6, 2, 2, 2, 2, 2, 2, 2, 2),
        _mm512_set_epi32(12, 12, 12, 12, 12, 12, 12, 12, 8, 8, 8, 8, 8, 8, 8, 8),
        _mm512_set_epi32(14, 14, 14, 14, 14, 14, 14, 14, 10, 10, 10, 10, 10, 10, 10, 10)};
    const int8_t* q = in.q8.data();
    const float* x2 = in.pair_scale.data();
    const float* qs2 = in.pair_qsum.data();
    __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
    __m512 mins = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < in.cols / 256; ++sb) {
      const uint8_t* b = w + kBlock * sb;
      for (int64_t line = 0; line < kBlock; line += 64) prefetch_ahead<Pf>(b + line);
      const __m512 sm = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(k_scales_interleaved(b)));
      // d, dmin, d, dmin, ...: the 32-bit word at b broadcast, then 16 fp16 converted
      const __m512 dd = _mm512_cvtph_ps(
          _mm256_castps_si256(_mm256_broadcast_ss(reinterpret_cast<const float*>(b))));
      const __m512 f8 = _mm512_mul_ps(_mm512_mul_ps(dd, sm), _mm512_loadu_ps(x2 + 16 * sb));
      mins = _mm512_fmadd_ps(f8, _mm512_loadu_ps(qs2 + 16 * sb), mins);
      __m512i qh2 = _mm512_setzero_si512();
      if constexpr (Five) {
        const __m256i qh = ld256(b + 16);
        qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      }
      const int8_t* qb = q + 256 * sb;
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m512i raw = _mm512_loadu_si512(b + kNibbles + 64 * h);
        __m512i lo = _mm512_and_si512(raw, m4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
        if constexpr (Five) {
          lo = _mm512_or_si512(lo, high_bits(qh2, 4 * h));
          hi = _mm512_or_si512(hi, high_bits(qh2, 4 * h + 1));
        }
        const __m512i sl = dot_u8i8(_mm512_setzero_si512(), lo, _mm512_loadu_si512(qb + 128 * h));
        const __m512i sh =
            dot_u8i8(_mm512_setzero_si512(), hi, _mm512_loadu_si512(qb + 128 * h + 64));
        a[2 * h] = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick[2 * h], f8), _mm512_cvtepi32_ps(sl),
                                   a[2 * h]);
        a[2 * h + 1] = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick[2 * h + 1], f8),
                                       _mm512_cvtepi32_ps(sh), a[2 * h + 1]);
      }
    }
    const __m512 t = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, t);
    // the min terms sit in the odd lanes, sub-block s at 2s + 1: packed into 8 lanes in order
    const __m256 mins8 = _mm512_castps512_ps256(_mm512_maskz_compress_ps(0xAAAA, mins));
    out[0] = hsum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8))) - hsum(mins8);
  }
};
#endif

// Q6_K (210 B per 256 values: ql[128], qh[64], int8 scales[16], fp16 d) on int8 input levels
// (RowDotInput::q8 in value order). Two halves of 128 values; in each, for l < 32, values l,
// l + 32, l + 64, l + 96 take 4 low bits from ql[l], ql[l + 32] (low, low, high, high nibble)
// and 2 high bits from qh[l] (bits 0-1, 2-3, 4-5, 6-7); weight = d * sc[value / 16] * (code -
// 32). The codes are kept unsigned (0..63) so they meet the signed levels in byte products; the
// 32 taken off every code is RowDotInput::offset4 (-32 times the sum of each 4 levels), the
// starting value of the int32 lane that sums those 4 products, so every lane holds an exact
// sum of (code - 32) * level. Each lane is then scaled by d * sc[g] * scale[i] of its 16-value
// group g (32-value input block i) into a float accumulator.
inline __m256 q6k_group_factors(const uint8_t* b, const float* xs8, int half) {
  // groups 8 half .. 8 half + 7: d * sc[g] * scale[g / 2]
  const __m256 sc = _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 192 + 8 * half))));
  const __m256 x = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(xs8 + 4 * half)),
                                            _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(half_at(b + 208)), sc), x);
}

struct Q6KRows256 {
  static constexpr int kRows = 1;
  template <int R, bool Pf>
  static void run(const uint8_t* w, uint64_t, const RowDotInput& in, float* out) {
    static_assert(R == 1, "one row at a time");
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t* q = in.q8.data();
    const int32_t* o4 = in.offset4.data();
    const float* xs = in.scale.data();
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
    for (int64_t sb = 0; sb < in.cols / 256; ++sb) {
      const uint8_t* b = w + 210 * sb;
      for (int64_t line = 0; line < 210; line += 64) prefetch_ahead<Pf>(b + line);
#pragma GCC unroll 2
      for (int hf = 0; hf < 2; ++hf) {
        const __m256 f = q6k_group_factors(b, xs + 8 * sb, hf);
        const uint8_t* ql = b + 64 * hf;
        const __m256i la = ld256(ql), lb = ld256(ql + 32), hb = ld256(b + 128 + 32 * hf);
        const __m256i v[4] = {_mm256_or_si256(_mm256_and_si256(la, m4),
                                              _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)),
                              _mm256_or_si256(_mm256_and_si256(lb, m4),
                                              _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)),
                              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(la, 4), m4),
                                              _mm256_and_si256(hb, m30)),
                              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lb, 4), m4),
                                              _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30))};
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {  // values 32j .. 32j + 31 of the half: groups 2j, 2j + 1
          const int64_t at = 256 * sb + 128 * hf + 32 * j;
          const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + at));
          const __m256i s =
              _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(v[j], x), ones),
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o4 + at / 4)));
          const __m256 fj =
              _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1,
                                                            2 * j + 1, 2 * j + 1, 2 * j + 1));
          a[j] = _mm256_fmadd_ps(fj, _mm256_cvtepi32_ps(s), a[j]);
        }
      }
    }
    out[0] = hsum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
  }
};

#if defined(__AVX512F__) && defined(__AVX512BW__)
// 64 values per register: the half's 64 ql bytes in one load give values 0-63 (low nibbles) and
// 64-127 (high nibbles) in order; qh and qh >> 2 side by side supply their top bits (bits 0-1
// and 2-3 shifted up to 4-5 for the first, bits 4-5 and 6-7 as they sit for the second).
struct Q6KRows512 {
  static constexpr int kRows = 1;
  template <int R, bool Pf>
  static void run(const uint8_t* w, uint64_t, const RowDotInput& in, float* out) {
    static_assert(R == 1, "one row at a time");
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    // lane i of quarter k (values 64k .. 64k + 63) sums values of group 4k + i / 4
    const __m512i pick0 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i pick1 = _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
    const int8_t* q = in.q8.data();
    const int32_t* o4 = in.offset4.data();
    const float* xs = in.scale.data();
    __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
    for (int64_t sb = 0; sb < in.cols / 256; ++sb) {
      const uint8_t* b = w + 210 * sb;
      for (int64_t line = 0; line < 210; line += 64) prefetch_ahead<Pf>(b + line);
#pragma GCC unroll 2
      for (int hf = 0; hf < 2; ++hf) {
        const __m512 f = _mm512_castps256_ps512(q6k_group_factors(b, xs + 8 * sb, hf));
        const __m512i l = _mm512_loadu_si512(b + 64 * hf);
        const __m256i qh = ld256(b + 128 + 32 * hf);
        const __m512i h2 =
            _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        const __m512i lo = _mm512_or_si512(_mm512_and_si512(l, m4),
                                           _mm512_and_si512(_mm512_slli_epi16(h2, 4), m30));
        const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                           _mm512_and_si512(h2, m30));
        const int64_t at = 256 * sb + 128 * hf;
        const __m512i s0 =
            dot_u8i8(_mm512_loadu_si512(o4 + at / 4), lo, _mm512_loadu_si512(q + at));
        const __m512i s1 =
            dot_u8i8(_mm512_loadu_si512(o4 + at / 4 + 16), hi, _mm512_loadu_si512(q + at + 64));
        a[2 * hf] =
            _mm512_fmadd_ps(_mm512_permutexvar_ps(pick0, f), _mm512_cvtepi32_ps(s0), a[2 * hf]);
        a[2 * hf + 1] =
            _mm512_fmadd_ps(_mm512_permutexvar_ps(pick1, f), _mm512_cvtepi32_ps(s1), a[2 * hf + 1]);
      }
    }
    const __m512 t = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, t);
    out[0] = hsum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8)));
  }
};
#endif

// Rows [r0, r1) in groups of K::kRows, the rest one at a time.
template <class K>
void rows_by(const WeightMatrix& w, const RowDotInput& in, int64_t r0, int64_t r1, float* y,
             bool accumulate) {
  const uint64_t rb = w.row_bytes();
  float v[K::kRows];
  const auto put = [&](int64_t r, float value) {
    float& o = y[r - r0];
    o = accumulate ? o + value : value;
  };
  // the rows' first kPrefetchAhead bytes: the requests inside the loop only run that far ahead
  const uint8_t* start = w.data + static_cast<uint64_t>(r0) * rb;
  const uint64_t bytes = static_cast<uint64_t>(r1 - r0) * rb;
  const auto rows = [&]<bool Pf>() {
    if constexpr (Pf)
      for (uint64_t off = 0; off < std::min<uint64_t>(kPrefetchAhead, bytes); off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(start + off), _MM_HINT_T0);
    int64_t r = r0;
    for (; r + K::kRows <= r1; r += K::kRows) {
      K::template run<K::kRows, Pf>(w.data + static_cast<uint64_t>(r) * rb, rb, in, v);
      for (int j = 0; j < K::kRows; ++j) put(r + j, v[j]);
    }
    for (; r < r1; ++r) {
      K::template run<1, Pf>(w.data + static_cast<uint64_t>(r) * rb, rb, in, v);
      put(r, v[0]);
    }
  };
  if (rb * static_cast<uint64_t>(w.rows) >= kPrefetchMinBytes)
    rows.template operator()<true>();
  else
    rows.template operator()<false>();
}

using RowsFn = void (*)(const WeightMatrix&, const RowDotInput&, int64_t, int64_t, float*, bool);

// The 32-value block types: the widest kernel the build has.
#if defined(VQ_ROW_DOT_BLOCK32_BYTES)
template <Block32 T>
using Block32Best =
    std::conditional_t<T == Block32::Q8_0, Block32Rows512<T>, Block32ByteRows512<T>>;
#elif defined(__AVX512F__) && defined(__AVX512BW__)
template <Block32 T>
using Block32Best = Block32Rows512<T>;
#else
template <Block32 T>
using Block32Best = Block32Rows<T>;
#endif

RowsFn dot_for(GgmlType t) {
  switch (t) {
    case GgmlType::F16:
      return rows_by<F16Rows>;
    case GgmlType::BF16:
      return rows_by<Bf16Rows>;
    case GgmlType::Q8_0:
      return rows_by<Block32Best<Block32::Q8_0>>;
    case GgmlType::Q4_0:
      return rows_by<Block32Best<Block32::Q4_0>>;
    case GgmlType::Q4_1:
      return rows_by<Block32Best<Block32::Q4_1>>;
    case GgmlType::Q5_0:
      return rows_by<Block32Best<Block32::Q5_0>>;
    case GgmlType::Q5_1:
      return rows_by<Block32Best<Block32::Q5_1>>;
    case GgmlType::Q4_K:
#if defined(__AVX512F__) && defined(__AVX512BW__)
      return rows_by<KQuantRows512<false>>;
    case GgmlType::Q5_K:
      return rows_by<KQuantRows512<true>>;
#else
      return rows_by<KQuantRows256<false>>;
    case GgmlType::Q5_K:
      return rows_by<KQuantRows256<true>>;
#endif
    case GgmlType::Q6_K:
#if defined(__AVX512F__) && defined(__AVX512BW__)
      return rows_by<Q6KRows512>;
#else
      return rows_by<Q6KRows256>;
#endif
    default:
      return nullptr;
  }
}

}  // namespace

bool has_row_dot(GgmlType t) {
  return dot_for(t) != nullptr;
}

void dot_rows(const WeightMatrix& w, const RowDotInput& in, int64_t r0, int64_t r1, float* y,
              bool accumulate) {
  const RowsFn fn = dot_for(w.type);
  VQ_CHECK(fn != nullptr, InvalidArgument, "kernels: no fused row dot for ",
           ggml_type_name(static_cast<uint32_t>(w.type)));
  VQ_CHECK(in.type == w.type && in.cols == w.cols, InvalidArgument,
           "kernels: row-dot input prepared for ", ggml_type_name(static_cast<uint32_t>(in.type)),
           " x ", in.cols, ", used with ", ggml_type_name(static_cast<uint32_t>(w.type)), " x ",
           w.cols);
  fn(w, in, r0, r1, y, accumulate);
}

#else  // no AVX2 + FMA + F16C: every type takes the tiled path

bool has_row_dot(GgmlType) {
  return false;
}

void dot_rows(const WeightMatrix& w, const RowDotInput&, int64_t, int64_t, float*, bool) {
  VQ_THROW(InvalidArgument, "kernels: no fused row dot for ",
           ggml_type_name(static_cast<uint32_t>(w.type)), " in this build");
}

#endif

namespace {
// Whether Q4_0 / Q4_1 / Q5_0 / Q5_1 meet int8 levels (Block32ByteRows512) or int16 ones.
#if defined(VQ_ROW_DOT_BLOCK32_BYTES)
constexpr bool kBlock32Bytes = true;
#else
constexpr bool kBlock32Bytes = false;
#endif
}  // namespace

bool row_dot_rounds_input(GgmlType t) {
  if (!has_row_dot(t)) return false;
  return t != GgmlType::F16 && t != GgmlType::BF16;
}

int row_dot_input_levels(GgmlType t) {
  if (!row_dot_rounds_input(t)) return 0;
  return ggml_block_values(t) == 256 || (kBlock32Bytes && t != GgmlType::Q8_0) ? 127 : 32767;
}

void prepare_row_dot_input(GgmlType t, const float* x, int64_t cols, RowDotInput& in) {
  in.type = t;
  in.x = x;
  in.cols = cols;
  if (t == GgmlType::BF16 && has_row_dot(t)) {
    const int64_t chunks = cols / 16;
    in.split.resize(static_cast<size_t>(16 * chunks));
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t i = 0; i < 8; ++i) {
        in.split[static_cast<size_t>(16 * c + i)] = x[16 * c + 2 * i];
        in.split[static_cast<size_t>(16 * c + 8 + i)] = x[16 * c + 2 * i + 1];
      }
    return;
  }
  if (!row_dot_rounds_input(t)) return;
  const bool kquant = ggml_block_values(t) == 256;
  const bool bytes = row_dot_input_levels(t) == 127;
  const int64_t block = kquant ? 256 : 32;  // the K-quants' levels are placed per super-block
  VQ_CHECK(cols % block == 0, InvalidArgument, "kernels: row-dot input of ", cols,
           " values is not a whole number of ", block, "-value blocks");
  const int64_t nb = cols / 32;
  const float levels = static_cast<float>(row_dot_input_levels(t));
  // The 32-value types on int8 levels (Block32ByteRows512): pairs of blocks, the last padded.
  const bool pairs = bytes && !kquant;
  const int64_t stored = pairs ? (nb + 1) / 2 * 64 : cols;
  const bool has_min = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
  // what each unsigned code carries above the signed one
  const int32_t code_offset = t == GgmlType::Q6_K   ? 32
                              : t == GgmlType::Q4_0 ? 8
                              : t == GgmlType::Q5_0 ? 16
                                                    : 0;
  if (bytes) in.q8.assign(static_cast<size_t>(stored), 0);
  if (code_offset != 0 && bytes) in.offset4.assign(static_cast<size_t>(stored / 4), 0);
  if (pairs) {
    in.lane_scale.assign(static_cast<size_t>(stored / 4), 0.0f);
    if (has_min) in.lane_min.assign(static_cast<size_t>(stored / 4), 0.0f);
  }
  if (!bytes) in.q.resize(static_cast<size_t>(cols));
  in.scale.resize(static_cast<size_t>(nb));
  in.qsum.resize(static_cast<size_t>(nb));
#if defined(VQ_ROW_DOT_AVX2) && defined(__AVX512F__) && defined(__AVX512BW__)
  const bool pair_lanes = t == GgmlType::Q4_K || t == GgmlType::Q5_K;  // KQuantRows512 reads them
#else
  constexpr bool pair_lanes = false;
#endif
  if (pair_lanes) {
    in.pair_scale.resize(static_cast<size_t>(2 * nb));
    in.pair_qsum.resize(static_cast<size_t>(2 * nb));
  }
  int32_t qb[32];
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < 32; ++i) {
      finite = finite && std::isfinite(xb[i]);
      amax = std::fabs(xb[i]) > amax ? std::fabs(xb[i]) : amax;
    }
    int32_t sum = 0;
    float scale = 0.0f;
    if (!finite || amax == 0.0f) {  // a non-finite input makes the block's products NaN
      for (int32_t& v : qb) v = 0;
      scale = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    } else {
      const float inv = levels / amax;
      for (int i = 0; i < 32; ++i) {
        const float r = std::nearbyint(xb[i] * inv);
        qb[i] = static_cast<int32_t>(r > levels ? levels : (r < -levels ? -levels : r));
        sum += qb[i];
      }
      scale = amax / levels;
    }
    in.scale[static_cast<size_t>(b)] = scale;
    in.qsum[static_cast<size_t>(b)] = sum;
    if (pair_lanes) {
      in.pair_scale[static_cast<size_t>(2 * b)] = in.pair_scale[static_cast<size_t>(2 * b + 1)] =
          scale;
      in.pair_qsum[static_cast<size_t>(2 * b)] = 0.0f;
      in.pair_qsum[static_cast<size_t>(2 * b + 1)] = static_cast<float>(sum);
    }
    if (!bytes) {
      int16_t* dst = in.q.data() + 32 * b;
      for (int i = 0; i < 32; ++i) dst[i] = static_cast<int16_t>(qb[i]);
      continue;
    }
    // where value i of the block is stored in q8
    const auto at = [&](int i) -> int64_t {
      if (kquant)
        return t == GgmlType::Q6_K ? 32 * b + i : 256 * (b / 8) + k_level_offset(b % 8) + i;
      // the pair's 4-value groups alternate (Block32ByteRows512::codes64)
      const int64_t g = i < 16 ? 2 * (i / 4) : 8 + 2 * ((i - 16) / 4);
      return 64 * (b / 2) + 4 * (g + b % 2) + i % 4;
    };
    for (int i = 0; i < 32; ++i) in.q8[static_cast<size_t>(at(i))] = static_cast<int8_t>(qb[i]);
    if (code_offset != 0)
      for (int i = 0; i < 32; i += 4)  // 4 consecutive values are 4 consecutive stored bytes
        in.offset4[static_cast<size_t>(at(i) / 4)] =
            -code_offset * (qb[i] + qb[i + 1] + qb[i + 2] + qb[i + 3]);
    if (pairs)
      for (int i = 0; i < 32; i += 4) {
        const auto lane = static_cast<size_t>(at(i) / 4);
        in.lane_scale[lane] = scale;
        if (has_min) in.lane_min[lane] = scale * static_cast<float>(sum) * 0.125f;
      }
  }
}

void dot_rows(const WeightMatrix& w, const float* x, int64_t r0, int64_t r1, float* y,
              bool accumulate) {
  RowDotInput in;
  prepare_row_dot_input(w.type, x, w.cols, in);
  dot_rows(w, in, r0, r1, y, accumulate);
}

}  // namespace vq::kernels::detail

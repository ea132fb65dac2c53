#include "codecs/kivi_codec.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "codecs/bit_pack.hpp"
#include "coding/byte_io.hpp"
#include "coding/huffman.hpp"
#include "coding/quantizer.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/tensor.hpp"

namespace vq::codecs {

namespace {

void get_params(const uint8_t* p, coding::AffineParams& a) {
  std::memcpy(&a.min, p, 4);
  std::memcpy(&a.scale, p + 4, 4);
}
void put_params(const coding::AffineParams& a, uint8_t* p) {
  std::memcpy(p, &a.min, 4);
  std::memcpy(p + 4, &a.scale, 4);
}

// sum_c codes[c] * x[c] in eight lanes (c mod 8), added pairwise: an order fixed by D that the
// compiler can vectorize.
float lane_dot(const uint8_t* codes, const float* x, int64_t D) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t c = 0;
  for (; c + 8 <= D; c += 8)
    for (int j = 0; j < 8; ++j) lane[j] += static_cast<float>(codes[c + j]) * x[c + j];
  for (int j = 0; c < D; ++c, ++j) lane[j] += static_cast<float>(codes[c]) * x[c];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

}  // namespace

KiviCodec::KiviCodec(int64_t dim, bool keys, int bits, int64_t group, int64_t residual)
    : RowCodec(dim), keys_(keys), bits_(bits), group_(group), residual_(residual) {
  VQ_CHECK(dim >= 1, InvalidArgument, "kivi: head_dim = ", dim, " must be >= 1");
  VQ_CHECK(bits >= 1 && bits <= coding::kMaxQuantBits, InvalidArgument, "kivi: bits = ", bits,
           " is outside [1, ", coding::kMaxQuantBits, "]");
  VQ_CHECK(group >= 1 && residual >= 0, InvalidArgument, "kivi: group = ", group,
           " must be >= 1 and residual = ", residual, " >= 0");
}

int64_t KiviCodec::row_bytes() const {
  return (keys_ ? 0 : 8 * groups()) + code_bytes();
}

int64_t KiviCodec::chunk_param_bytes(int64_t) const {
  return keys_ ? 8 * dim() : 0;
}

void KiviCodec::encode(const float* rows, int64_t n, uint8_t* params, uint8_t* codes) {
  const int64_t D = dim(), rb = row_bytes();
  std::vector<float> x(static_cast<size_t>(n * D));
  for (int64_t i = 0; i < n * D; ++i) x[static_cast<size_t>(i)] = round_to_fp16(rows[i]);
  std::vector<uint8_t> q(static_cast<size_t>(n * D));
  if (keys_) {
    std::vector<float> col(static_cast<size_t>(n));
    std::vector<uint8_t> cq(static_cast<size_t>(n));
    for (int64_t c = 0; c < D; ++c) {  // each channel over the chunk's tokens
      for (int64_t t = 0; t < n; ++t)
        col[static_cast<size_t>(t)] = x[static_cast<size_t>(t * D + c)];
      const coding::AffineParams p = coding::fit_affine(col.data(), n, bits_);
      coding::quantize_affine(col.data(), n, p, bits_, cq.data());
      for (int64_t t = 0; t < n; ++t)
        q[static_cast<size_t>(t * D + c)] = cq[static_cast<size_t>(t)];
      put_params(p, params + 8 * c);
    }
    for (int64_t t = 0; t < n; ++t) pack_fixed(q.data() + t * D, D, bits_, codes + t * rb);
  } else {
    for (int64_t t = 0; t < n; ++t) {  // each token in groups of group_ channels
      uint8_t* row = codes + t * rb;
      for (int64_t g = 0; g < groups(); ++g) {
        const int64_t c0 = g * group_, w = std::min(group_, D - c0);
        const float* xs = x.data() + t * D + c0;
        const coding::AffineParams p = coding::fit_affine(xs, w, bits_);
        coding::quantize_affine(xs, w, p, bits_, q.data() + t * D + c0);
        put_params(p, row + 8 * g);
      }
      pack_fixed(q.data() + t * D, D, bits_, row + 8 * groups());
    }
  }
}

void KiviCodec::decode(const uint8_t* params, const uint8_t* codes, int64_t n, float* out) const {
  const int64_t D = dim(), rb = row_bytes();
  uint8_t qbuf[512];
  std::vector<uint8_t> qheap;
  uint8_t* q = qbuf;
  if (D > 512) {
    qheap.resize(static_cast<size_t>(D));
    q = qheap.data();
  }
  if (keys_) {
    std::vector<float> mins(static_cast<size_t>(D)), scales(static_cast<size_t>(D));
    for (int64_t c = 0; c < D; ++c) {
      coding::AffineParams p;
      get_params(params + 8 * c, p);
      mins[static_cast<size_t>(c)] = p.min;
      scales[static_cast<size_t>(c)] = p.scale;
    }
    for (int64_t t = 0; t < n; ++t) {
      unpack_fixed(codes + t * rb, D, bits_, q);
      float* y = out + t * D;
      for (int64_t c = 0; c < D; ++c)
        y[c] = mins[static_cast<size_t>(c)] +
               static_cast<float>(q[c]) * scales[static_cast<size_t>(c)];
    }
  } else {
    for (int64_t t = 0; t < n; ++t) {
      const uint8_t* row = codes + t * rb;
      unpack_fixed(row + 8 * groups(), D, bits_, q);
      float* y = out + t * D;
      for (int64_t g = 0; g < groups(); ++g) {
        coding::AffineParams p;
        get_params(row + 8 * g, p);
        const int64_t c0 = g * group_, w = std::min(group_, D - c0);
        coding::dequantize_affine(q + c0, w, p, y + c0);
      }
    }
  }
}

void KiviCodec::dot_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* q,
                         float* out) const {
  const int64_t D = dim(), rb = row_bytes(), G = groups();
  if (n <= 0) return;
  thread_local std::vector<uint8_t> qc;  // one row's unpacked codes
  thread_local std::vector<float> folded;
  qc.resize(static_cast<size_t>(D));
  if (keys_) {
    folded.resize(static_cast<size_t>(D));
    float base = 0.0f;
    for (int64_t c = 0; c < D; ++c) {
      coding::AffineParams p;
      get_params(params + 8 * c, p);
      base += p.min * q[c];
      folded[static_cast<size_t>(c)] = p.scale * q[c];
    }
    for (int64_t i = 0; i < n; ++i) {
      unpack_fixed(codes + i * rb, D, bits_, qc.data());
      out[i] = base + lane_dot(qc.data(), folded.data(), D);
    }
    return;
  }
  folded.resize(static_cast<size_t>(G));  // sum of q over each group
  for (int64_t g = 0; g < G; ++g) {
    float s = 0.0f;
    for (int64_t c = g * group_; c < std::min(D, (g + 1) * group_); ++c) s += q[c];
    folded[static_cast<size_t>(g)] = s;
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* row = codes + i * rb;
    unpack_fixed(row + 8 * G, D, bits_, qc.data());
    float total = 0.0f;
    for (int64_t g = 0; g < G; ++g) {
      coding::AffineParams p;
      get_params(row + 8 * g, p);
      const int64_t c0 = g * group_, w = std::min(group_, D - c0);
      total +=
          p.min * folded[static_cast<size_t>(g)] + p.scale * lane_dot(qc.data() + c0, q + c0, w);
    }
    out[i] = total;
  }
}

void KiviCodec::axpy_rows(const uint8_t* params, const uint8_t* codes, int64_t n, const float* w,
                          float* acc) const {
  const int64_t D = dim(), rb = row_bytes(), G = groups();
  if (n <= 0) return;
  thread_local std::vector<uint8_t> qc;
  thread_local std::vector<float> mins, scales;  // per channel (keys) or per value's group
  qc.resize(static_cast<size_t>(D));
  mins.resize(static_cast<size_t>(D));
  scales.resize(static_cast<size_t>(D));
  for (int64_t c = 0; keys_ && c < D; ++c) {  // keys: the chunk's channel parameters, once
    coding::AffineParams p;
    get_params(params + 8 * c, p);
    mins[static_cast<size_t>(c)] = p.min;
    scales[static_cast<size_t>(c)] = p.scale;
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* row = codes + i * rb;
    for (int64_t g = 0; !keys_ && g < G; ++g) {  // values: the row's group parameters
      coding::AffineParams p;
      get_params(row + 8 * g, p);
      for (int64_t c = g * group_; c < std::min(D, (g + 1) * group_); ++c) {
        mins[static_cast<size_t>(c)] = p.min;
        scales[static_cast<size_t>(c)] = p.scale;
      }
    }
    unpack_fixed(row + (keys_ ? 0 : 8 * G), D, bits_, qc.data());
    for (int64_t c = 0; c < D; ++c)
      acc[c] +=
          w[i] * (mins[static_cast<size_t>(c)] +
                  static_cast<float>(qc[static_cast<size_t>(c)]) * scales[static_cast<size_t>(c)]);
  }
}

int64_t KiviCodec::stored_chunk_bytes(const uint8_t*, const uint8_t* codes, int64_t n) const {
  // KiviRowCoder's chunk: varint n, every (min, scale), one Huffman stream of the n * D codes
  // in token order.
  const int64_t D = dim(), rb = row_bytes();
  std::vector<uint8_t> q(static_cast<size_t>(n * D));
  for (int64_t t = 0; t < n; ++t)
    unpack_fixed(codes + t * rb + (keys_ ? 0 : 8 * groups()), D, bits_, q.data() + t * D);
  std::vector<uint8_t> out;
  coding::put_varint(out, static_cast<uint64_t>(n));
  coding::HuffmanEncoder enc;
  enc.encode(q.data(), q.size(), bits_, out);
  const int64_t params = keys_ ? 8 * D : 8 * n * groups();
  return static_cast<int64_t>(out.size()) + params;
}

std::unique_ptr<store::RowCodec> make_kivi_row_codec(const CacheConfig& c,
                                                     const store::StreamInfo& s) {
  return std::make_unique<KiviCodec>(s.head_dim, s.kv == 0, static_cast<int>(c.get_int("bits")),
                                     c.get_int("group"), c.get_int("residual"));
}

}  // namespace vq::codecs

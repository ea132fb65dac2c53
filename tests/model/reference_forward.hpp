// An independent scalar forward pass in the style of llama2.c's run.c (plain loops, its own
// key/value arrays, RoPE from powf like run.c), used to check the Engine. Double accumulators in
// the dot products keep its own rounding error small.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "veloxquant/model.hpp"
#include "veloxquant/tensor.hpp"

namespace vq::testing {

class ReferenceForward {
 public:
  /// fp16_kv: the cached keys (after RoPE) and values are rounded to fp16, as VeloxQuant's full
  /// cache stores them; false keeps them fp32 (llama2.c's run.c).
  explicit ReferenceForward(const Model& m, bool fp16_kv = true)
      : m_(m), c_(m.config()), fp16_kv_(fp16_kv) {
    const size_t kv = static_cast<size_t>(c_.n_layers * c_.seq_len * c_.kv_dim());
    key_cache_.assign(kv, 0.0f);
    value_cache_.assign(kv, 0.0f);
  }

  /// Logits [vocab] of `token` at position `pos` (positions must be fed in order from 0).
  /// last_q (if not null) receives layer-0 RoPE'd queries [dim].
  std::vector<float> forward(int32_t token, int64_t pos, std::vector<float>* layer0_q = nullptr) {
    const int64_t dim = c_.dim, kv_dim = c_.kv_dim(), hd = c_.head_dim(), hid = c_.hidden_dim;
    const int64_t kv_mul = c_.n_heads / c_.n_kv_heads;
    std::vector<float> x(m_.token_embedding() + token * dim,
                         m_.token_embedding() + (token + 1) * dim);
    std::vector<float> xb(dim), q(dim), att(c_.seq_len), out(dim), h1(hid), h3(hid);
    for (int64_t l = 0; l < c_.n_layers; ++l) {
      const LayerWeights w = m_.layer(l);
      rmsnorm(xb, x, w.rms_att);
      float* k = key_cache_.data() + (l * c_.seq_len + pos) * kv_dim;
      float* v = value_cache_.data() + (l * c_.seq_len + pos) * kv_dim;
      matmul(q.data(), xb.data(), w.wq, dim, dim);
      matmul(k, xb.data(), w.wk, dim, kv_dim);
      matmul(v, xb.data(), w.wv, dim, kv_dim);
      for (int64_t i = 0; i < dim; i += 2) {  // run.c's RoPE loop
        const int64_t head_dim_idx = i % hd;
        const float freq =
            1.0f / std::pow(10000.0f, static_cast<float>(head_dim_idx) / static_cast<float>(hd));
        const float val = static_cast<float>(pos) * freq;
        const float fcr = std::cos(val), fci = std::sin(val);
        const int rotn = i < kv_dim ? 2 : 1;
        for (int r = 0; r < rotn; ++r) {
          float* vec = r == 0 ? q.data() : k;
          const float v0 = vec[i], v1 = vec[i + 1];
          vec[i] = v0 * fcr - v1 * fci;
          vec[i + 1] = v0 * fci + v1 * fcr;
        }
      }
      if (fp16_kv_)
        for (int64_t i = 0; i < kv_dim; ++i) {
          k[i] = round_to_fp16(k[i]);
          v[i] = round_to_fp16(v[i]);
        }
      if (l == 0 && layer0_q) *layer0_q = q;
      for (int64_t h = 0; h < c_.n_heads; ++h) {
        const float* qh = q.data() + h * hd;
        const int64_t kvh = h / kv_mul;
        float mx = -INFINITY;
        for (int64_t t = 0; t <= pos; ++t) {
          const float* kt = key_cache_.data() + (l * c_.seq_len + t) * kv_dim + kvh * hd;
          double s = 0;
          for (int64_t i = 0; i < hd; ++i) s += static_cast<double>(qh[i]) * kt[i];
          att[t] = static_cast<float>(s / std::sqrt(static_cast<double>(hd)));
          mx = std::max(mx, att[t]);
        }
        double sum = 0;
        for (int64_t t = 0; t <= pos; ++t) {
          att[t] = std::exp(att[t] - mx);
          sum += att[t];
        }
        for (int64_t i = 0; i < hd; ++i) {
          double acc = 0;
          for (int64_t t = 0; t <= pos; ++t)
            acc += att[t] / sum * value_cache_[(l * c_.seq_len + t) * kv_dim + kvh * hd + i];
          out[h * hd + i] = static_cast<float>(acc);
        }
      }
      matmul(xb.data(), out.data(), w.wo, dim, dim);
      for (int64_t i = 0; i < dim; ++i) x[i] += xb[i];
      rmsnorm(xb, x, w.rms_ffn);
      matmul(h1.data(), xb.data(), w.w1, dim, hid);
      matmul(h3.data(), xb.data(), w.w3, dim, hid);
      for (int64_t i = 0; i < hid; ++i) h1[i] = h1[i] / (1.0f + std::exp(-h1[i])) * h3[i];
      matmul(xb.data(), h1.data(), w.w2, hid, dim);
      for (int64_t i = 0; i < dim; ++i) x[i] += xb[i];
    }
    std::vector<float> xf(dim);
    rmsnorm(xf, x, m_.rms_final());
    std::vector<float> logits(c_.vocab_size);
    matmul(logits.data(), xf.data(), m_.classifier(), dim, c_.vocab_size);
    return logits;
  }

 private:
  // out[d] = W[d, n] x[n]
  static void matmul(float* out, const float* x, const float* w, int64_t n, int64_t d) {
    for (int64_t i = 0; i < d; ++i) {
      double s = 0;
      for (int64_t j = 0; j < n; ++j) s += static_cast<double>(w[i * n + j]) * x[j];
      out[i] = static_cast<float>(s);
    }
  }
  static void rmsnorm(std::vector<float>& o, const std::vector<float>& x, const float* w) {
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + 1e-5);
    for (size_t i = 0; i < x.size(); ++i) o[i] = static_cast<float>(w[i] * (r * x[i]));
  }

  const Model& m_;
  ModelConfig c_;
  std::vector<float> key_cache_, value_cache_;
  bool fp16_kv_ = true;
};

}  // namespace vq::testing

// The forward pass (llama2.c / Llama / Qwen2 architecture) with a VeloxQuant cache per layer.
// Activations are fp32; the matrices stay in their stored type and go through src/kernels.
//
// Per layer, for input x [dim]:
//   xb = rmsnorm(x) * rms_att;  q = Wq xb (+ bq), k = Wk xb (+ bk), v = Wv xb (+ bv);
//   RoPE on q and k (adjacent pairs or half-split, as the model's weights expect)
//   cache.update(k, v, q);  att_h = softmax(q_h K^T / sqrt(D)) V  over the kept rows of KV head
//   h / (n_heads / n_kv_heads);  x += Wo att
//   xb = rmsnorm(x) * rms_ffn;  x += W2 (silu(W1 xb) * W3 xb)
// then logits = Wcls (rmsnorm(x) * rms_final).
// Decode reuses preallocated buffers and Tensors, so the loop itself does not touch the heap
// (a cache may still grow its own storage).
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/rng.hpp"
#include "core/thread_pool.hpp"
#include "kernels/matmul.hpp"
#include "store/row_kernels.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"

namespace vq {

namespace {

using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A prefill chunk's queries attend this many rows at a time: its score scratch holds rows x
// (kept + chunk) floats per parallel piece instead of S x (kept + chunk).
constexpr int64_t kPrefillRows = 2048;

void rmsnorm(float* out, const float* x, const float* w, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  ss = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (ss * x[i]);
}

inline float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

// h1[i] = silu(h1[i]) * h3[i] for i < n, on the thread pool in pieces of 4096 values. Each value
// is computed alone by the same operations, so the bits do not depend on the pieces or the thread
// count. Serial, it cost about 2.3 ns a value (18.5 µs for decode's 8192 on the 1B shape, 10 ms a
// layer for a 512-token prefill); in decode it left the pool's worker idle for 29 µs before the
// down projection (with that product's input preparation), long enough to fall asleep: 17 sleeps
// a step, 1.2 with this (session 34, results/session34/runs.txt).
void swiglu(float* h1, const float* h3, int64_t n) {
  constexpr int64_t kPiece = 4096;
  parallel_for(n, kPiece, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) h1[i] = silu(h1[i]) * h3[i];
  });
}

// Per-thread decode attention scratch (scores of a piece's query heads, pre-RoPE key blocks, the
// token's own key), 64-byte aligned, grown on first use and then reused.
struct AttendScratch {
  AlignedFloats scores, kblock, kself;
};
AttendScratch& attend_scratch() {
  thread_local AttendScratch s;
  return s;
}

}  // namespace

struct Engine::Impl {
  const Model* model = nullptr;
  CacheConfig cfg;
  EngineOptions opt;
  ModelConfig c;
  int64_t D = 0, Hq = 0, Hkv = 0, G = 0, hd2 = 0;
  float scale = 1.0f, eps = 1e-5f;
  bool half_split = false;  // RoPE pairs (i, i + D/2) instead of (2i, 2i + 1)
  std::vector<LayerTensors> w;
  WeightMatrix emb, out;
  std::vector<std::unique_ptr<KVCache>> caches;
  std::vector<char> pre_rope;
  int64_t pos = 0;

  std::vector<float> rope_cos, rope_sin;  // [seq_len, head_dim / 2]
  // Decode scratch, 64-byte aligned (see AlignedAllocator).
  AlignedFloats x, xb, q, qr, k, v, att, hb, hb2, logits;
  Tensor qt, kt, vt;  // what the cache is given: [1, Hq, 1, D], [1, Hkv, 1, D], [1, Hkv, 1, D]
  // Prefill output.
  std::vector<float> plogits;

  Engine::CacheFactory factory;  // empty: build from cfg with build_caches

  void build() {
    if (factory) {
      caches.clear();
      for (int64_t l = 0; l < c.n_layers; ++l) {
        caches.push_back(factory(l));
        VQ_CHECK(caches.back() != nullptr && caches.back()->head_dim() == D, InvalidArgument,
                 "Engine: the cache factory must return a cache with head_dim ", D, " for layer ",
                 l);
      }
      cfg = caches.front()->config();
    } else {
      caches = build_caches(cfg, c.n_layers, D, opt.seed);
    }
    pre_rope.resize(caches.size());
    for (size_t l = 0; l < caches.size(); ++l) pre_rope[l] = caches[l]->wants_pre_rope_keys();
    pos = 0;
  }

  void rope(float* v, int64_t n_heads, int64_t p) const {
    const float* cs = rope_cos.data() + p * hd2;
    const float* sn = rope_sin.data() + p * hd2;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* r = v + h * D;
      if (half_split) {
        for (int64_t i = 0; i < hd2; ++i) {
          const float v0 = r[i], v1 = r[i + hd2];
          r[i] = v0 * cs[i] - v1 * sn[i];
          r[i + hd2] = v0 * sn[i] + v1 * cs[i];
        }
        continue;
      }
      for (int64_t i = 0; i < hd2; ++i) {
        const float v0 = r[2 * i], v1 = r[2 * i + 1];
        r[2 * i] = v0 * cs[i] - v1 * sn[i];
        r[2 * i + 1] = v0 * sn[i] + v1 * cs[i];
      }
    }
  }

  // Rows [first, first + m) of a kept head's keys into `dst` [m, D], rotated when the cache
  // holds pre-RoPE keys (each row by its own position).
  void read_keys(const store::RowSource& K, const int64_t* positions, bool pre, int64_t first,
                 int64_t m, float* dst) {
    K.read(first, m, dst);
    if (!pre) return;
    for (int64_t i = 0; i < m; ++i) {
      const int64_t p = positions[first + i];
      VQ_CHECK(p >= 0 && p < c.seq_len, Error, cfg.method(), ": kept position ", p,
               " is outside [0, seq_len = ", c.seq_len, ")");
      rope(dst + i * D, 1, p);
    }
  }

  // llama.cpp's K.Q over a quantized K cache: the query rounded through q8_0 blocks of `block`
  // values (scale amax / 127 stored at fp16, codes round(x / scale)).
  void round_query_q8(const float* q, float* out, int64_t block) const {
    for (int64_t b0 = 0; b0 < D; b0 += block) {
      const int64_t m = std::min(block, D - b0);
      float amax = 0.0f;
      for (int64_t i = 0; i < m; ++i) amax = std::max(amax, std::fabs(q[b0 + i]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const float dh = round_to_fp16(d);
      for (int64_t i = 0; i < m; ++i) out[b0 + i] = std::round(q[b0 + i] * id) * dh;
    }
  }

  // att[g] = softmax(q_g K^T * scale) V over the head's n kept rows, for the query heads
  // g in [g0, g1) of one KV head (q_g = qs + g * D), plus one extra row (self_k, self_v) when
  // self_k is not null. Scratch: the calling thread's.
  // Scores and the weighted sum of values are computed by the store on its resident rows
  // (RowSource::dot / accumulate), kReadBlock rows at a time for every query head of the group so
  // that a block's bytes are read while they are in cache. qs goes to the store as computed (a
  // codec that rounds queries does it itself); qr (qs rounded to q8_0 when the cache asks, else
  // qs) multiplies the keys attention holds itself: the self row, and pre-RoPE keys, which are
  // read into scratch and rotated. Every score is a function of its row and query only, and the
  // values are added row by row in order, so the result does not depend on block boundaries.
  // Rows at positions below min_pos (a sliding window's start) get no weight.
  void attend_head(const store::RowSource& K, const store::RowSource& Vs, const int64_t* positions,
                   bool pre, const float* qs, const float* qr, const float* self_k,
                   const float* self_v, float* att, int64_t g0, int64_t g1, int64_t min_pos) {
    const int64_t n = K.rows();
    const int64_t m = n + (self_k ? 1 : 0);
    for (int64_t x = g0 * D; x < g1 * D; ++x) att[x] = 0.0f;
    if (m == 0) return;
    AlignedFloats& kblock = attend_scratch().kblock;
    AlignedFloats& scores_buf = attend_scratch().scores;
    const int64_t ng = g1 - g0;
    // Query head g's scores at scores + (g - g0) * ms: every row starts 64-byte aligned, so the
    // vectorized softmax below treats a head's scores the same way whichever piece of the
    // parallel loop (and so whichever offset in this buffer) the head falls in.
    const int64_t ms = (m + 15) / 16 * 16;
    if (static_cast<int64_t>(scores_buf.size()) < ng * ms)
      scores_buf.resize(static_cast<size_t>(ng * ms));
    float* const scores = scores_buf.data();
    if (pre) {
      const int64_t blk = std::min<int64_t>(store::kReadBlock, std::max<int64_t>(n, 1));
      if (static_cast<int64_t>(kblock.size()) < blk * D)
        kblock.resize(static_cast<size_t>(blk * D));
    }
    for (int64_t first = 0; first < n; first += store::kReadBlock) {
      const int64_t cnt = std::min(store::kReadBlock, n - first);
      if (pre) {
        read_keys(K, positions, pre, first, cnt, kblock.data());
        for (int64_t g = g0; g < g1; ++g)
          store::float_dot_rows(store::FloatRows::F32,
                                reinterpret_cast<const uint8_t*>(kblock.data()), 4 * D, cnt, D,
                                qr + g * D, scores + (g - g0) * ms + first);
      } else {  // the group's queries together: a store unpacks each row once for all of them
        K.dot_many(first, cnt, qs + g0 * D, ng, scores + first, ms);
      }
    }
    for (int64_t g = g0; g < g1; ++g) {
      float* sc = scores + (g - g0) * ms;
      if (self_k)  // the fp32 kernel, as for rows read into scratch
        store::float_dot_rows(store::FloatRows::F32, reinterpret_cast<const uint8_t*>(self_k),
                              4 * D, 1, D, qr + g * D, sc + n);
      // softmax in SIMD (Eigen's vectorized exp and fixed-order sums on an aligned row whose
      // length alone decides which entries take the vector path); rows before the sliding
      // window's start get no weight
      Eigen::Map<Eigen::ArrayXf, Eigen::Aligned64> a(sc, m);
      const auto set_out_of_window = [&](float value) {
        if (min_pos > 0)
          for (int64_t i = 0; i < n; ++i)
            if (positions[i] < min_pos) sc[i] = value;
      };
      constexpr float kNone = -std::numeric_limits<float>::infinity();
      a *= scale;
      set_out_of_window(kNone);
      const float mx = a.maxCoeff();
      if (mx == kNone) {  // every row outside the window
        a.setZero();
        continue;
      }
      a = (a - mx).exp();
      set_out_of_window(0.0f);  // exactly no weight (the vector exp of -inf is not exactly 0)
      a *= 1.0f / a.sum();
    }
    // every stored row in one call: a latent-space codec then maps each query's sum back once
    // (a source that decodes rows does so in bounded blocks itself)
    if (n > 0) Vs.accumulate_many(0, n, scores, ms, ng, att + g0 * D);
    if (self_k)
      for (int64_t g = g0; g < g1; ++g) {
        const float w = scores[(g - g0) * ms + n];
        for (int64_t d = 0; d < D; ++d) att[g * D + d] += w * self_v[d];
      }
  }

  // The first position a token at position p attends to: p - sliding_window + 1 (0 without a
  // window). Keys before it get no weight, whatever the cache keeps.
  int64_t window_start(int64_t p) const {
    return c.sliding_window > 0 ? std::max<int64_t>(0, p - c.sliding_window + 1) : 0;
  }

  // True when the head kept position p (the token just added).
  static bool holds(const int64_t* positions, int64_t n, int64_t p) {
    for (int64_t i = n - 1; i >= 0; --i)
      if (positions[i] == p) return true;
    return false;
  }

  // Query heads per piece of a parallel attention loop whose heads each cost about `macs`; whole
  // KV groups when there are several (a piece then reads each group's blocks once).
  // Each head's arithmetic is the same whatever the split (pieces of min_piece_macs()).
  int64_t head_grain(int64_t macs) const {
    int64_t grain = std::min(Hq, grain_for(macs));
    if (Hkv > 1) grain = std::min(Hq, (grain + G - 1) / G * G);
    return std::max<int64_t>(1, grain);
  }

  // q/k/v of n rows of normalized input xn [n, dim]: [n, dim], [n, kv_dim], [n, kv_dim], with
  // the biases added when the model has them (Qwen2).
  void project_qkv(const LayerTensors& lw, const float* xn, int64_t n, float* qo, float* ko,
                   float* vo) const {
    const int64_t dim = c.dim, kv_dim = c.kv_dim();
    if (n == 1) {
      kernels::matvec(lw.wq, xn, qo);
      kernels::matvec(lw.wk, xn, ko);
      kernels::matvec(lw.wv, xn, vo);
    } else {
      kernels::matmul(lw.wq, xn, n, qo);
      kernels::matmul(lw.wk, xn, n, ko);
      kernels::matmul(lw.wv, xn, n, vo);
    }
    const auto add = [n](float* y, const float* b, int64_t m) {
      if (!b) return;
      for (int64_t s = 0; s < n; ++s)
        for (int64_t i = 0; i < m; ++i) y[s * m + i] += b[i];
    };
    add(qo, lw.bq, dim);
    add(ko, lw.bk, kv_dim);
    add(vo, lw.bv, kv_dim);
  }

  const float* step(int32_t token) {
    VQ_CHECK(token >= 0 && token < c.vocab_size, InvalidArgument, "Engine::step: token ", token,
             " is outside the vocabulary [0, ", c.vocab_size, ")");
    VQ_CHECK(pos < c.seq_len, InvalidArgument, "Engine::step: position ", pos,
             " reached the model's context length seq_len = ", c.seq_len);
    const int64_t dim = c.dim, kv_dim = c.kv_dim(), hid = c.hidden_dim;
    kernels::dequantize_row(emb, token, x.data());
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const LayerTensors& lw = w[static_cast<size_t>(l)];
      const bool pre = pre_rope[static_cast<size_t>(l)];
      rmsnorm(xb.data(), x.data(), lw.rms_att, dim, eps);
      project_qkv(lw, xb.data(), 1, q.data(), k.data(), v.data());
      rope(q.data(), Hq, pos);
      if (!pre) rope(k.data(), Hkv, pos);
      std::memcpy(qt.data(), q.data(), sizeof(float) * static_cast<size_t>(dim));
      std::memcpy(kt.data(), k.data(), sizeof(float) * static_cast<size_t>(kv_dim));
      std::memcpy(vt.data(), v.data(), sizeof(float) * static_cast<size_t>(kv_dim));
      KVCache& cache = *caches[static_cast<size_t>(l)];
      cache.update(kt, vt, &qt);
      int64_t qblock = 32;
      const bool round_q = cache.quantizes_queries(&qblock);
      if (round_q)
        for (int64_t h = 0; h < Hq; ++h)
          round_query_q8(q.data() + h * D, qr.data() + h * D, qblock);
      const float* qrs = round_q ? qr.data() : q.data();
      // Query heads [h0, h1), KV group by KV group; each head writes only its slice of att.
      const auto attend = [&](int64_t h0, int64_t h1) {
        for (int64_t kh = h0 / G; kh * G < h1; ++kh) {
          const store::RowSource& K = cache.keys(0, kh);
          const int64_t* positions = cache.positions(0, kh);
          const float* self_k = nullptr;
          const float* self_v = nullptr;
          if (!opt.strict_view && !holds(positions, K.rows(), pos)) {  // dropped at once: still
            AlignedFloats& kself = attend_scratch().kself;             // attend to itself
            kself.resize(static_cast<size_t>(D));
            std::memcpy(kself.data(), k.data() + kh * D, sizeof(float) * static_cast<size_t>(D));
            if (pre) rope(kself.data(), 1, pos);
            self_k = kself.data();
            self_v = v.data() + kh * D;
          }
          attend_head(K, cache.values(0, kh), positions, pre, q.data() + kh * G * D,
                      qrs + kh * G * D, self_k, self_v, att.data() + kh * G * D,
                      std::max(h0, kh * G) - kh * G, std::min(h1, (kh + 1) * G) - kh * G,
                      window_start(pos));
        }
      };
      parallel_for(Hq, head_grain(2 * D * (cache.keys(0, 0).rows() + 1)), attend);
      kernels::matvec(lw.wo, att.data(), x.data(), true);
      rmsnorm(xb.data(), x.data(), lw.rms_ffn, dim, eps);
      kernels::matvec(lw.w1, xb.data(), hb.data());
      kernels::matvec(lw.w3, xb.data(), hb2.data());
      swiglu(hb.data(), hb2.data(), hid);
      kernels::matvec(lw.w2, hb.data(), x.data(), true);
    }
    rmsnorm(x.data(), x.data(), model->rms_final(), dim, eps);
    kernels::matvec(out, x.data(), logits.data());
    ++pos;
    return logits.data();
  }

  const std::vector<float>& prefill(const std::vector<int32_t>& tokens, bool all_logits) {
    const int64_t S = static_cast<int64_t>(tokens.size());
    const int64_t dim = c.dim, kv_dim = c.kv_dim(), hid = c.hidden_dim, V = c.vocab_size;
    VQ_CHECK(pos + S <= c.seq_len, InvalidArgument, "Engine::prefill: positions ", pos, "..",
             pos + S - 1, " run past the model's context length seq_len = ", c.seq_len);
    for (int32_t t : tokens)
      VQ_CHECK(t >= 0 && t < V, InvalidArgument, "Engine::prefill: token ", t,
               " is outside the vocabulary [0, ", V, ")");
    plogits.clear();
    if (S == 0) return plogits;
    const int64_t pos0 = pos;
    RowMatF X(S, dim), Xn(S, dim), Q(S, dim), K(S, kv_dim), Kr(S, kv_dim), Vv(S, kv_dim), A(S, dim),
        H1(S, hid), H3(S, hid);
    for (int64_t s = 0; s < S; ++s)
      kernels::dequantize_row(emb, tokens[static_cast<size_t>(s)], X.row(s).data());
    Tensor qT(1, Hq, S, D), kT(1, Hkv, S, D), vT(1, Hkv, S, D);
    RowMatF Qk, Krh, Vvh;
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const LayerTensors& lw = w[static_cast<size_t>(l)];
      const bool pre = pre_rope[static_cast<size_t>(l)];
      for (int64_t s = 0; s < S; ++s)
        rmsnorm(Xn.row(s).data(), X.row(s).data(), lw.rms_att, dim, eps);
      project_qkv(lw, Xn.data(), S, Q.data(), K.data(), Vv.data());
      Kr = K;
      for (int64_t s = 0; s < S; ++s) {
        rope(Q.row(s).data(), Hq, pos0 + s);
        rope(Kr.row(s).data(), Hkv, pos0 + s);
      }
      KVCache& cache = *caches[static_cast<size_t>(l)];
      int64_t qblock = 32;
      const bool round_q = cache.quantizes_queries(&qblock);
      // The queries that multiply keys held outside the store (the chunk's own rows, pre-RoPE keys
      // read into scratch): rounded to q8_0 when the cache asks (the store rounds its own).
      const RowMatF* Qs = &Q;
      if (round_q) {
        Qk = Q;
        for (int64_t s = 0; s < S; ++s)
          for (int64_t h = 0; h < Hq; ++h)
            round_query_q8(Qk.row(s).data() + h * D, Qk.row(s).data() + h * D, qblock);
        Qs = &Qk;
      }
      // The chunk's own rows as attention sees them: as the cache will hold them (fp16 rows,
      // q8_0 blocks, a chunked codec's fp16 window), so that prefilling a chunk and stepping
      // through it agree. Pre-RoPE keys are stored before the rotation: rounded, then rotated.
      Krh = pre ? K : Kr;
      Vvh = Vv;
      for (int64_t kh = 0; kh < Hkv; ++kh) {
        cache.round_as_stored(0, kh, Krh.data() + kh * D, S, kv_dim);
        cache.round_as_stored(1, kh, Vvh.data() + kh * D, S, kv_dim);
      }
      if (pre)
        for (int64_t s = 0; s < S; ++s) rope(Krh.row(s).data(), Hkv, pos0 + s);
      // What was kept before this chunk is read block by block; the chunk's own rows follow.
      // Query heads on the thread pool; head h writes only columns [h * D, (h + 1) * D) of A, and
      // a piece's score and key-block scratch is its own.
      const bool any = cache.batch() > 0;
      const int64_t n_old0 = any ? cache.keys(0, 0).rows() : 0;
      parallel_for(Hq, head_grain(2 * D * S * (n_old0 + S)), [&](int64_t h0, int64_t h1) {
        RowMatF Kblk, P;
        for (int64_t h = h0; h < h1; ++h) {
          const int64_t kh = h / G;
          const store::RowSource* Ko = any ? &cache.keys(0, kh) : nullptr;
          const store::RowSource* Vo = any ? &cache.values(0, kh) : nullptr;
          const int64_t* po = any ? cache.positions(0, kh) : nullptr;
          const int64_t n_old = any ? Ko->rows() : 0, n = n_old + S;
          const int64_t blk = std::min<int64_t>(store::kReadBlock, std::max<int64_t>(n_old, 1));
          if (pre) Kblk.resize(blk, D);
          auto Ah = A.middleCols(h * D, D);
          // The chunk's queries kPrefillRows at a time: the scores take rows x n floats per
          // piece, not S x n (a long prompt would need S^2). A chunk of up to kPrefillRows
          // tokens is one block: the same products as one pass.
          for (int64_t s0 = 0; s0 < S; s0 += kPrefillRows) {
            const int64_t bs = std::min(kPrefillRows, S - s0);
            P.resize(bs, n);
            for (int64_t first = 0; first < n_old; first += store::kReadBlock) {
              const int64_t cnt = std::min(store::kReadBlock, n_old - first);
              if (pre) {  // pre-RoPE keys: read, rotate, multiply
                read_keys(*Ko, po, pre, first, cnt, Kblk.data());
                P.middleCols(first, cnt).noalias() =
                    Qs->block(s0, h * D, bs, D) * Kblk.topRows(cnt).transpose();
              } else {  // on the stored rows (the store rounds the query if its codec asks)
                for (int64_t s = 0; s < bs; ++s)
                  Ko->dot(first, cnt, Q.row(s0 + s).data() + h * D, P.row(s).data() + first);
              }
            }
            P.rightCols(S).noalias() =
                Qs->block(s0, h * D, bs, D) * Krh.middleCols(kh * D, D).transpose();
            P *= scale;
            for (int64_t s = 0; s < bs; ++s) {  // causal: token s0 + s sees old rows + 0..s0 + s
              const int64_t valid = n_old + s0 + s + 1;
              auto row = P.row(s).head(valid);
              const int64_t lo = window_start(pos0 + s0 + s);  // a sliding window: none before lo
              if (lo > 0) {
                for (int64_t i = 0; i < n_old; ++i)
                  if (po[i] < lo) row[i] = -std::numeric_limits<float>::infinity();
                for (int64_t j = 0; j < s0 + s; ++j)
                  if (pos0 + j < lo) row[n_old + j] = -std::numeric_limits<float>::infinity();
              }
              const float mx = row.maxCoeff();
              row.array() = (row.array() - mx).exp();
              row /= row.sum();
              P.row(s).tail(n - valid).setZero();
            }
            Ah.middleRows(s0, bs).noalias() = P.rightCols(S) * Vvh.middleCols(kh * D, D);
            for (int64_t first = 0; first < n_old; first += store::kReadBlock) {
              const int64_t cnt = std::min(store::kReadBlock, n_old - first);
              for (int64_t s = 0; s < bs; ++s)
                Vo->accumulate(first, cnt, P.row(s).data() + first, A.row(s0 + s).data() + h * D);
            }
          }
        }
      });
      const RowMatF& Kstore = pre ? K : Kr;
      for (int64_t s = 0; s < S; ++s) {
        for (int64_t h = 0; h < Hkv; ++h) {
          std::memcpy(kT.row(0, h, s), Kstore.row(s).data() + h * D,
                      sizeof(float) * static_cast<size_t>(D));
          std::memcpy(vT.row(0, h, s), Vv.row(s).data() + h * D,
                      sizeof(float) * static_cast<size_t>(D));
        }
        for (int64_t h = 0; h < Hq; ++h)
          std::memcpy(qT.row(0, h, s), Q.row(s).data() + h * D,
                      sizeof(float) * static_cast<size_t>(D));
      }
      cache.update(kT, vT, &qT);
      kernels::matmul(lw.wo, A.data(), S, X.data(), true);
      for (int64_t s = 0; s < S; ++s)
        rmsnorm(Xn.row(s).data(), X.row(s).data(), lw.rms_ffn, dim, eps);
      kernels::matmul(lw.w1, Xn.data(), S, H1.data());
      kernels::matmul(lw.w3, Xn.data(), S, H3.data());
      swiglu(H1.data(), H3.data(), S * hid);
      kernels::matmul(lw.w2, H1.data(), S, X.data(), true);
    }
    const int64_t first = all_logits ? 0 : S - 1;
    const int64_t rows = S - first;
    plogits.resize(static_cast<size_t>(rows * V));
    // Positions on the thread pool (each one's product runs inline there, cut as it would be
    // alone, so the same bits); position s writes only row s of Xn and of the logits.
    parallel_for(rows, grain_for(dim * V), [&](int64_t b, int64_t e) {
      for (int64_t s = first + b; s < first + e; ++s) {
        rmsnorm(Xn.row(s).data(), X.row(s).data(), model->rms_final(), dim, eps);
        kernels::matvec(out, Xn.row(s).data(), plogits.data() + (s - first) * V);
      }
    });
    pos += S;
    return plogits;
  }
};

Engine::Engine(const Model& model, const CacheConfig& cache, const EngineOptions& opt)
    : impl_(std::make_unique<Impl>()) {
  VQ_CHECK(!cache.method().empty(), InvalidArgument, "Engine: empty cache config (no method)");
  impl_->cfg = cache;
  init(model, opt);
}

void Engine::init(const Model& model, const EngineOptions& opt) {
  Impl& m = *impl_;
  m.model = &model;
  m.opt = opt;
  m.c = model.config();
  VQ_CHECK(m.c.n_layers > 0, InvalidArgument, "Engine: the model is empty (not loaded)");
  m.D = m.c.head_dim();
  m.Hq = m.c.n_heads;
  m.Hkv = m.c.n_kv_heads;
  m.G = m.Hq / m.Hkv;
  m.hd2 = m.D / 2;
  m.scale = 1.0f / std::sqrt(static_cast<float>(m.D));
  m.eps = static_cast<float>(m.c.rms_norm_eps);
  m.half_split = m.c.rope_layout == RopeLayout::HalfSplit;
  for (int64_t l = 0; l < m.c.n_layers; ++l) m.w.push_back(model.tensors(l));
  m.emb = model.embedding_matrix();
  m.out = model.output_matrix();
  const std::vector<double> freqs = model.rope_frequencies();
  m.rope_cos.resize(static_cast<size_t>(m.c.seq_len * m.hd2));
  m.rope_sin.resize(m.rope_cos.size());
  for (int64_t p = 0; p < m.c.seq_len; ++p)
    for (int64_t i = 0; i < m.hd2; ++i) {
      const double a = static_cast<double>(p) * freqs[static_cast<size_t>(i)];
      m.rope_cos[static_cast<size_t>(p * m.hd2 + i)] = static_cast<float>(std::cos(a));
      m.rope_sin[static_cast<size_t>(p * m.hd2 + i)] = static_cast<float>(std::sin(a));
    }
  const auto sz = [](int64_t n) { return static_cast<size_t>(n); };
  m.x.resize(sz(m.c.dim));
  m.xb.resize(sz(m.c.dim));
  m.q.resize(sz(m.c.dim));
  m.qr.resize(sz(m.c.dim));
  m.k.resize(sz(m.c.kv_dim()));
  m.v.resize(sz(m.c.kv_dim()));
  m.att.resize(sz(m.c.dim));
  m.hb.resize(sz(m.c.hidden_dim));
  m.hb2.resize(sz(m.c.hidden_dim));
  m.logits.resize(sz(m.c.vocab_size));
  m.qt = Tensor(1, m.Hq, 1, m.D);
  m.kt = Tensor(1, m.Hkv, 1, m.D);
  m.vt = Tensor(1, m.Hkv, 1, m.D);
  m.build();
}

Engine::Engine(const Model& model, const std::string& cache_spec, const EngineOptions& opt)
    : Engine(model, CacheConfig::parse(cache_spec), opt) {}

Engine::Engine(const Model& model, CacheFactory make_layer_cache, const EngineOptions& opt)
    : impl_(std::make_unique<Impl>()) {
  VQ_CHECK(static_cast<bool>(make_layer_cache), InvalidArgument,
           "Engine: the cache factory is empty");
  impl_->factory = std::move(make_layer_cache);
  init(model, opt);
}

Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

const Model& Engine::model() const {
  return *impl_->model;
}
const CacheConfig& Engine::cache_config() const {
  return impl_->cfg;
}
const EngineOptions& Engine::options() const {
  return impl_->opt;
}
void Engine::reset() {
  impl_->build();
}
int64_t Engine::position() const {
  return impl_->pos;
}
const float* Engine::step(int32_t token) {
  return impl_->step(token);
}
const std::vector<float>& Engine::prefill(const std::vector<int32_t>& tokens, bool all_logits) {
  return impl_->prefill(tokens, all_logits);
}
int64_t Engine::n_layers() const {
  return impl_->c.n_layers;
}

const KVCache& Engine::cache(int64_t layer) const {
  VQ_CHECK(layer >= 0 && layer < n_layers(), InvalidArgument, "Engine::cache: layer ", layer,
           " is outside [0, ", n_layers(), ")");
  return *impl_->caches[static_cast<size_t>(layer)];
}

CacheStats Engine::stats() const {
  CacheStats total;
  for (size_t l = 0; l < impl_->caches.size(); ++l) {
    const CacheStats s = impl_->caches[l]->stats();
    if (l == 0) {
      total.tokens_seen = s.tokens_seen;
      total.tokens_kept = s.tokens_kept;
    }
    total.kept_bytes += s.kept_bytes;
    total.content_bytes += s.content_bytes;
    total.codec_param_bytes += s.codec_param_bytes;
    total.policy_bytes += s.policy_bytes;
    total.index_bytes += s.index_bytes;
    total.overhead_bytes += s.overhead_bytes;
    total.stored_bytes += s.stored_bytes;
    total.full_seq_bytes += s.full_seq_bytes;
  }
  total.compression_ratio = total.kept_bytes > 0 ? total.full_seq_bytes / total.kept_bytes : 1.0;
  return total;
}

int32_t argmax(const float* logits, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

std::vector<int32_t> generate(Engine& engine, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opt,
                              const std::function<void(int32_t, int32_t)>& on_token) {
  VQ_CHECK(!prompt.empty(), InvalidArgument,
           "generate: the prompt is empty (it should start with BOS)");
  VQ_CHECK(opt.steps >= 0, InvalidArgument, "generate: steps = ", opt.steps, " must be >= 0");
  VQ_CHECK(opt.temperature >= 0 && std::isfinite(opt.temperature), InvalidArgument,
           "generate: temperature = ", opt.temperature, " must be finite and >= 0");
  const ModelConfig& c = engine.model().config();
  const int64_t V = c.vocab_size;
  const std::vector<int32_t> stop = opt.stop_tokens.empty()
                                        ? std::vector<int32_t>{Tokenizer::kBos, Tokenizer::kEos}
                                        : opt.stop_tokens;
  std::vector<int32_t> out;
  const float* logits = engine.prefill(prompt, false).data();
  Rng rng(opt.seed);
  std::vector<double> p(static_cast<size_t>(V));
  int32_t prev = prompt.back();
  while (static_cast<int64_t>(out.size()) < opt.steps) {
    int32_t next;
    if (opt.temperature <= 0) {
      next = argmax(logits, V);
    } else {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < V; ++i)
        mx = std::max(mx, static_cast<double>(logits[i]) / opt.temperature);
      double sum = 0;
      for (int64_t i = 0; i < V; ++i) {
        p[static_cast<size_t>(i)] = std::exp(static_cast<double>(logits[i]) / opt.temperature - mx);
        sum += p[static_cast<size_t>(i)];
      }
      const double u = rng.uniform() * sum;
      double acc = 0;
      next = static_cast<int32_t>(V - 1);
      for (int64_t i = 0; i < V; ++i) {
        acc += p[static_cast<size_t>(i)];
        if (u < acc) {
          next = static_cast<int32_t>(i);
          break;
        }
      }
    }
    if (opt.stop_at_bos && std::find(stop.begin(), stop.end(), next) != stop.end()) break;
    out.push_back(next);
    if (on_token) on_token(prev, next);
    prev = next;
    if (static_cast<int64_t>(out.size()) >= opt.steps || engine.position() >= c.seq_len) break;
    logits = engine.step(next);
  }
  return out;
}

}  // namespace vq

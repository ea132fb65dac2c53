#include "transform/transform_cache.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <set>

#include "veloxquant/errors.hpp"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace vq::transform {

namespace {

/// dst[i] = round_to_fp16(src[i]) (round to nearest even). The F16C instructions implement the
/// same IEEE conversion as vq::fp32_to_fp16 (finite inputs; huge values become inf in both).
void round_fp16(const float* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = round_to_fp16(src[i]);
}

/// Resize to `n` elements, growing capacity geometrically (amortized O(1) per appended row).
template <typename T>
void grow_to(std::vector<T>& v, size_t n) {
  if (n > v.capacity()) v.reserve(std::max(n, 2 * v.capacity()));
  v.resize(n);
}

}  // namespace

std::vector<int64_t> even_chunks(int64_t n, int64_t chunk) {
  std::vector<int64_t> sizes;
  if (n <= 0) return sizes;
  const int64_t count = (n + chunk - 1) / chunk;
  const int64_t base = n / count, extra = n % count;
  for (int64_t i = 0; i < count; ++i) sizes.push_back(base + (i < extra ? 1 : 0));
  return sizes;
}

TransformCache::TransformCache(CacheConfig config, CacheContext ctx, TransformSettings settings,
                               CoderFactory factory)
    : TransformCache(std::move(config), ctx, settings,
                     StreamCoderFactory([f = std::move(factory)](int64_t width, const StreamId&) {
                       return f(width);
                     })) {}

TransformCache::TransformCache(CacheConfig config, CacheContext ctx, TransformSettings settings,
                               StreamCoderFactory factory)
    : KVCache(std::move(config), ctx), settings_(settings), factory_(std::move(factory)) {
  VQ_CHECK(settings_.chunk_tokens >= 1 && settings_.fit_tokens >= 1, InvalidArgument,
           this->config().method(), ": chunk_tokens = ", settings_.chunk_tokens,
           " and fit_tokens = ", settings_.fit_tokens, " must both be >= 1");
  VQ_CHECK(settings_.sink_tokens >= 0 && settings_.recent_tokens >= 0, InvalidArgument,
           this->config().method(), ": sink_tokens = ", settings_.sink_tokens,
           " and recent_tokens = ", settings_.recent_tokens, " must both be >= 0");
}

int64_t TransformCache::width() const {
  return settings_.coupled ? kv_heads() * head_dim() : head_dim();
}

const TransformCache::Stream& TransformCache::stream(int64_t b, int64_t h, int kv) const {
  VQ_CHECK(!streams_.empty(), InvalidArgument, config().method(),
           ": no stream exists before the first update");
  VQ_CHECK(b >= 0 && b < batch() && h >= 0 && h < kv_heads() && (kv == 0 || kv == 1),
           InvalidArgument, config().method(), ": stream (b = ", b, ", h = ", h, ", kv = ", kv,
           ") is outside B = ", batch(), ", H = ", kv_heads(), ", kv in {0, 1}");
  const int64_t idx = settings_.coupled ? b * 2 + kv : (b * kv_heads() + h) * 2 + kv;
  return streams_[static_cast<size_t>(idx)];
}

void TransformCache::on_shape_known(int64_t B, int64_t H) {
  heads_.assign(static_cast<size_t>(B * H), HeadBuf{});
  const int64_t W = width();
  const int64_t per_batch = settings_.coupled ? 1 : H;
  streams_.clear();
  streams_.resize(static_cast<size_t>(B * per_batch * 2));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < per_batch; ++g)
      for (int kv = 0; kv < 2; ++kv) {
        Stream& st = streams_[static_cast<size_t>((b * per_batch + g) * 2 + kv)];
        const StreamId id{context().layer, settings_.coupled ? -1 : g, kv, H};
        st.enc = factory_(W, id);
        st.dec = factory_(W, id);
        st.b = b;
        st.h = g;
        st.kv = kv;
        st.sec.head = settings_.coupled ? -1 : g;
      }
}

void TransformCache::do_update(const Tensor& keys, const Tensor& values, const Tensor*) {
  const int64_t B = batch(), H = kv_heads(), D = head_dim(), S = keys.S();
  const int64_t W = width();
  const int64_t n_old = offset();
  const int64_t n_new = n_old + S;

  grow_to(positions_, static_cast<size_t>(n_new));
  for (int64_t i = n_old; i < n_new; ++i) positions_[static_cast<size_t>(i)] = i;
  // Raw rows are visible at once, fp16-rounded; encoded chunks overwrite them with decoded rows.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      HeadBuf& hb = heads_[static_cast<size_t>(b * H + h)];
      grow_to(hb.k, static_cast<size_t>(n_new * D));
      grow_to(hb.v, static_cast<size_t>(n_new * D));
      const float* ks = keys.head(b, h);
      const float* vs = values.head(b, h);
      float* kd = hb.k.data() + n_old * D;
      float* vd = hb.v.data() + n_old * D;
      round_fp16(ks, kd, S * D);
      round_fp16(vs, vd, S * D);
    }

  for (Stream& st : streams_) {
    const Tensor& src = st.kv == 0 ? keys : values;
    // Sink positions stay as the fp16 rows already in the view and never reach the coder.
    const int64_t sink = std::min(S, settings_.sink_tokens - st.n_sink);
    st.n_sink += sink;
    const int64_t S2 = S - sink;
    if (S2 > 0) {  // none when every new row was a sink (pending may be unallocated then)
      grow_to(st.pending, static_cast<size_t>((st.n_pending + S2) * W));
      float* dst = st.pending.data() + st.n_pending * W;
      if (settings_.coupled) {
        for (int64_t t = 0; t < S2; ++t)
          for (int64_t h = 0; h < H; ++h)
            std::memcpy(dst + t * W + h * D, src.row(st.b, h, sink + t),
                        sizeof(float) * static_cast<size_t>(D));
      } else {
        std::memcpy(dst, src.head(st.b, st.h) + sink * D,
                    sizeof(float) * static_cast<size_t>(S2 * D));
      }
    }
    st.n_pending += S2;
    process(st);
  }
  refresh_view();
}

void TransformCache::write_header(Stream& st) {
  st.enc->fit(st.pending.data(), st.n_pending, st.sec);
  coding::ByteReader r(st.sec.bytes.data(), st.sec.bytes.size());
  st.dec->read_header(r);
  assert(r.at_end());
  st.read_pos = r.pos();
  st.fitted = true;
}

void TransformCache::process(Stream& st) {
  const int64_t keep = settings_.recent_tokens, chunk = settings_.chunk_tokens;
  int64_t consumed = 0;
  if (!st.fitted) {
    if (!st.enc->needs_fit()) {
      st.fitted = true;
    } else if (st.enc->fit_uses_rows() && st.n_pending >= settings_.fit_tokens) {
      write_header(st);
      // The rows the fit saw are encoded at once (the spec's prefill), in even chunks, except
      // the recent_tokens newest, which stay raw.
      for (int64_t n : even_chunks(std::max<int64_t>(0, st.n_pending - keep), chunk)) {
        encode_rows(st, consumed, n);
        consumed += n;
      }
    }
  }
  // A coder with a given model (no fit on rows) writes its header before its first chunk.
  const bool ready = st.fitted || !st.enc->fit_uses_rows();
  if (ready) {
    while (st.n_pending - consumed - chunk >= keep) {
      if (!st.fitted) write_header(st);
      encode_rows(st, consumed, chunk);
      consumed += chunk;
    }
  }
  const int64_t W = width();
  if (consumed > 0) {
    const int64_t left = st.n_pending - consumed;
    std::memmove(st.pending.data(), st.pending.data() + consumed * W,
                 sizeof(float) * static_cast<size_t>(left * W));
    st.n_pending = left;
    st.n_rounded = std::max<int64_t>(0, st.n_rounded - consumed);
  }
  // What stays in the window is stored at fp16.
  float* p = st.pending.data() + st.n_rounded * W;
  round_fp16(p, p, (st.n_pending - st.n_rounded) * W);
  st.n_rounded = st.n_pending;
}

void TransformCache::encode_rows(Stream& st, int64_t first, int64_t n) {
  const int64_t W = width(), D = head_dim(), H = kv_heads();
  st.enc->encode_chunk(st.pending.data() + first * W, n, st.sec);
  if (static_cast<int64_t>(decoded_.size()) < n * W) decoded_.resize(static_cast<size_t>(n * W));
  coding::ByteReader r(st.sec.bytes.data(), st.sec.bytes.size(), st.read_pos);
  int64_t got = 0;
  while (got < n) got += st.dec->decode_chunk(r, n - got, decoded_.data() + got * W);
  assert(got == n && r.at_end());
  st.read_pos = r.pos();
  const int64_t row0 = st.n_sink + st.n_encoded;
  if (settings_.coupled) {
    for (int64_t h = 0; h < H; ++h) {
      HeadBuf& hb = heads_[static_cast<size_t>(st.b * H + h)];
      float* dst = (st.kv == 0 ? hb.k : hb.v).data();
      for (int64_t t = 0; t < n; ++t)
        std::memcpy(dst + (row0 + t) * D, decoded_.data() + t * W + h * D,
                    sizeof(float) * static_cast<size_t>(D));
    }
  } else {
    HeadBuf& hb = heads_[static_cast<size_t>(st.b * H + st.h)];
    float* dst = (st.kv == 0 ? hb.k : hb.v).data();
    std::memcpy(dst + row0 * D, decoded_.data(), sizeof(float) * static_cast<size_t>(n * D));
  }
  st.n_encoded += n;
}

void TransformCache::refresh_view() {
  // (KVCache::update advances offset() only after do_update returns, so count the positions.)
  const int64_t rows = static_cast<int64_t>(positions_.size());
  ksrc_.clear();
  vsrc_.clear();
  for (size_t i = 0; i < heads_.size(); ++i) {
    ksrc_.emplace_back(heads_[i].k.data(), rows, head_dim());
    vsrc_.emplace_back(heads_[i].v.data(), rows, head_dim());
  }
}

CacheStats TransformCache::stats() const {
  CacheStats st;
  st.tokens_seen = offset();
  st.tokens_kept = offset();
  st.full_seq_bytes = static_cast<double>(batch() * kv_heads()) * static_cast<double>(offset()) *
                      static_cast<double>(head_dim()) * 2.0 * 2.0;
  const double D = static_cast<double>(head_dim());
  ByteBreakdown bd[2];
  int64_t fixed_payload[2] = {0, 0};
  int64_t raw_tokens = 0, encoded_tokens = 0, sink_tokens = 0, external = 0;
  std::set<int64_t> external_seen;  // a shared calibration entry is counted once
  bool all_fitted = !streams_.empty();
  for (const Stream& s : streams_) {
    bd[s.kv] += s.sec.breakdown;
    bd[s.kv].raw += (s.n_pending + s.n_sink) * width() * 2;
    fixed_payload[s.kv] += s.sec.fixed_width_payload;
    all_fitted = all_fitted && s.fitted;
    if (s.fitted && s.enc->external_entry() >= 0 &&
        external_seen.insert(s.enc->external_entry()).second)
      external += s.enc->external_bytes();
  }
  if (!streams_.empty()) {
    raw_tokens = streams_[0].n_pending + streams_[0].n_sink;
    sink_tokens = streams_[0].n_sink;
    encoded_tokens = streams_[0].n_encoded;
  }
  const double full_kv =
      static_cast<double>(batch() * kv_heads()) * static_cast<double>(offset()) * D * 2.0;
  double realized[2], pre[2], gain[2], ratio[2];
  for (int kv = 0; kv < 2; ++kv) {
    realized[kv] = static_cast<double>(bd[kv].total());
    pre[kv] = static_cast<double>(bd[kv].total() - bd[kv].payload - bd[kv].table + fixed_payload[kv]);
    const double coded = static_cast<double>(bd[kv].payload + bd[kv].table);
    gain[kv] = coded > 0 ? static_cast<double>(fixed_payload[kv]) / coded : 1.0;
    ratio[kv] = realized[kv] > 0 ? full_kv / realized[kv] : 1.0;
  }
  const double total = realized[0] + realized[1];
  st.kept_bytes = total;
  st.compression_ratio = total > 0 ? st.full_seq_bytes / total : 1.0;
  const double coded = static_cast<double>(bd[0].payload + bd[0].table + bd[1].payload + bd[1].table);
  const double gain_all =
      coded > 0 ? static_cast<double>(fixed_payload[0] + fixed_payload[1]) / coded : 1.0;
  ByteBreakdown all = bd[0];
  all += bd[1];
  st.extra = {
      {"kvtc_bytes", total},
      {"kvtc_bytes_k", realized[0]},
      {"kvtc_bytes_v", realized[1]},
      {"pre_entropy_bytes", pre[0] + pre[1]},
      {"pre_entropy_bytes_k", pre[0]},
      {"pre_entropy_bytes_v", pre[1]},
      {"entropy_coding_gain", gain_all},
      {"entropy_coding_gain_k", gain[0]},
      {"entropy_coding_gain_v", gain[1]},
      {"full_seq_bytes", st.full_seq_bytes},
      {"full_seq_bytes_k", full_kv},
      {"full_seq_bytes_v", full_kv},
      {"compression_ratio", st.compression_ratio},
      {"compression_ratio_k", ratio[0]},
      {"compression_ratio_v", ratio[1]},
      {"basis_bytes", static_cast<double>(all.basis)},
      {"params_bytes", static_cast<double>(all.params)},
      {"payload_bytes", static_cast<double>(all.payload)},
      {"table_bytes", static_cast<double>(all.table)},
      {"raw_bytes", static_cast<double>(all.raw)},
      {"raw_tokens", static_cast<double>(raw_tokens)},
      {"sink_tokens", static_cast<double>(sink_tokens)},
      {"external_basis_bytes", static_cast<double>(external)},
      {"encoded_tokens", static_cast<double>(encoded_tokens)},
      {"fitted", all_fitted ? 1.0 : 0.0},
  };
  return st;
}

}  // namespace vq::transform

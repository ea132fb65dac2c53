#include "store/head_store.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "store/buffers.hpp"
#include "store/row_kernels.hpp"
#include "veloxquant/errors.hpp"

namespace vq::store {

StoreBytes& StoreBytes::operator+=(const StoreBytes& o) {
  content += o.content;
  params += o.params;
  index += o.index;
  scratch += o.scratch;
  stored += o.stored;
  external += o.external;
  window_rows += o.window_rows;
  encoded_rows += o.encoded_rows;
  chunks += o.chunks;
  return *this;
}

class HeadStore::Source final : public RowSource {
 public:
  Source(const HeadStore* s, int kv) : s_(s), kv_(kv) {}
  int64_t rows() const override { return s_->size(); }
  int64_t dim() const override { return s_->D_; }
  void read(int64_t first, int64_t n, float* out) const override { s_->read(kv_, first, n, out); }
  void dot(int64_t first, int64_t n, const float* q, float* out) const override {
    s_->dot(kv_, first, n, q, out);
  }
  void accumulate(int64_t first, int64_t n, const float* w, float* acc) const override {
    s_->accumulate(kv_, first, n, w, acc);
  }
  void dot_many(int64_t first, int64_t n, const float* qs, int64_t nq, float* out,
                int64_t out_stride) const override {
    s_->dot_many(kv_, first, n, qs, nq, out, out_stride);
  }
  void accumulate_many(int64_t first, int64_t n, const float* w, int64_t w_stride, int64_t nw,
                       float* acc) const override {
    s_->accumulate_many(kv_, first, n, w, w_stride, nw, acc);
  }
  void rebind(const HeadStore* s) { s_ = s; }

 private:
  const HeadStore* s_;
  int kv_;
};

const RowSource& HeadStore::keys() const {
  return *src_[0];
}
const RowSource& HeadStore::values() const {
  return *src_[1];
}

HeadStore::HeadStore(std::unique_ptr<RowCodec> k, std::unique_ptr<RowCodec> v) {
  VQ_CHECK(k && v, InvalidArgument, "HeadStore: a codec is missing");
  VQ_CHECK(k->dim() == v->dim() && k->dim() >= 1, InvalidArgument, "HeadStore: key codec dim ",
           k->dim(), " and value codec dim ", v->dim(), " must be equal and >= 1");
  VQ_CHECK(k->chunk_rows() == v->chunk_rows() && k->recent_rows() == v->recent_rows() &&
               k->sink_rows() == v->sink_rows() && k->fit_rows() == v->fit_rows(),
           InvalidArgument, "HeadStore: key and value codecs disagree on chunking (chunk ",
           k->chunk_rows(), "/", v->chunk_rows(), ", recent ", k->recent_rows(), "/",
           v->recent_rows(), ", sink ", k->sink_rows(), "/", v->sink_rows(), ", fit ",
           k->fit_rows(), "/", v->fit_rows(), ")");
  D_ = k->dim();
  chunk_rows_ = k->chunk_rows();
  codec_[0] = std::move(k);
  codec_[1] = std::move(v);
  for (int kv = 0; kv < 2; ++kv) pool_[kv] = RowPages(pool_row_bytes(kv));
  src_[0] = std::make_unique<Source>(this, 0);
  src_[1] = std::make_unique<Source>(this, 1);
}

HeadStore::HeadStore(HeadStore&& o) noexcept {
  *this = std::move(o);
}

HeadStore& HeadStore::operator=(HeadStore&& o) noexcept {
  if (this == &o) return *this;
  D_ = o.D_;
  chunk_rows_ = o.chunk_rows_;
  for (int kv = 0; kv < 2; ++kv) {
    codec_[kv] = std::move(o.codec_[kv]);
    src_[kv] = std::move(o.src_[kv]);
    if (src_[kv]) src_[kv]->rebind(this);
    pool_[kv] = std::move(o.pool_[kv]);
    stage_[kv] = std::move(o.stage_[kv]);
  }
  pos_ = std::move(o.pos_);
  loc_ = std::move(o.loc_);
  pool_owner_ = std::move(o.pool_owner_);
  chunks_ = std::move(o.chunks_);
  free_chunks_ = std::move(o.free_chunks_);
  stage_ok_ = std::move(o.stage_ok_);
  stage_pos0_ = o.stage_pos0_;
  generation_ = o.generation_;
  stage_n_ = o.stage_n_;
  return *this;
}

HeadStore::~HeadStore() = default;
HeadStore::HeadStore() = default;

int64_t HeadStore::append(const float* k, const float* v, int64_t pos) {
  const int64_t slot = size();
  VQ_CHECK(slot < INT32_MAX, InvalidArgument, "HeadStore: ", slot,
           " tokens held in one head reach the limit of 2^31 - 1");
  const int64_t prow = pool_rows();
  pos_.push_back(pos);
  if (chunked()) {  // row-wise codecs need no locations: pool row i is slot i
    loc_.push_back(Loc{-1, static_cast<int32_t>(prow)});
    pool_owner_.push_back(static_cast<int32_t>(slot));
  }
  const float* src[2] = {k, v};
  for (int kv = 0; kv < 2; ++kv) {
    uint8_t* dst = pool_[kv].push_back();
    if (chunked())
      fp32_to_fp16_n(src[kv], reinterpret_cast<uint16_t*>(dst), D_);
    else
      codec_[kv]->encode(src[kv], 1, nullptr, dst);
  }
  if (chunked()) {  // keep the fp32 input until settle() so that chunks encode the exact rows
    if (stage_n_ == 0) stage_pos0_ = pos;
    const int64_t i = pos - stage_pos0_;
    if (i >= 0 && i < (int64_t{1} << 20)) {
      if (i >= stage_n_) {
        stage_n_ = i + 1;
        grow_to(stage_ok_, static_cast<size_t>(stage_n_));
        for (int kv = 0; kv < 2; ++kv) grow_to(stage_[kv], static_cast<size_t>(stage_n_ * D_));
      }
      stage_ok_[static_cast<size_t>(i)] = 1;
      for (int kv = 0; kv < 2; ++kv)
        std::memcpy(stage_[kv].data() + i * D_, src[kv], sizeof(float) * static_cast<size_t>(D_));
    }
  }
  return slot;
}

void HeadStore::drop_pool_row(int32_t row) {
  const int32_t last = static_cast<int32_t>(pool_rows()) - 1;
  if (row != last) {
    for (int kv = 0; kv < 2; ++kv) pool_[kv].copy_row(last, row);
    if (chunked()) {
      const int32_t moved = pool_owner_[static_cast<size_t>(last)];
      pool_owner_[static_cast<size_t>(row)] = moved;
      loc_[static_cast<size_t>(moved)].row = row;
    }
  }
  if (chunked()) {
    pool_owner_.pop_back();
    maybe_shrink(pool_owner_);
  }
  for (int kv = 0; kv < 2; ++kv) {
    pool_[kv].pop_back();
    pool_[kv].trim();
  }
}

void HeadStore::drop_chunk_row(int32_t c, int32_t row) {
  Chunk& ch = chunks_[static_cast<size_t>(c)];
  const int32_t last = static_cast<int32_t>(ch.n) - 1;
  if (row != last) {
    for (int kv = 0; kv < 2; ++kv) {
      const int64_t rb = codec_[kv]->row_bytes();
      std::memcpy(ch.codes[kv].data() + row * rb, ch.codes[kv].data() + last * rb,
                  static_cast<size_t>(rb));
    }
    const int32_t moved = ch.owner[static_cast<size_t>(last)];
    ch.owner[static_cast<size_t>(row)] = moved;
    loc_[static_cast<size_t>(moved)].row = row;
  }
  ch.owner.pop_back();
  --ch.n;
  if (ch.n == 0) {
    ch = Chunk{};  // releases every buffer of the chunk
    free_chunks_.push_back(c);
    return;
  }
  for (int kv = 0; kv < 2; ++kv) {
    ch.codes[kv].resize(static_cast<size_t>(ch.n * codec_[kv]->row_bytes()));
    maybe_shrink(ch.codes[kv]);
  }
  ch.stored.reset();
}

void HeadStore::remove(int64_t slot) {
  VQ_CHECK(slot >= 0 && slot < size(), InvalidArgument, "HeadStore::remove: slot ", slot,
           " is outside [0, ", size(), ")");
  const int64_t last = size() - 1;
  if (!chunked()) {  // the pool mirrors the slots: its last row moves into the freed one
    drop_pool_row(static_cast<int32_t>(slot));
    pos_[static_cast<size_t>(slot)] = pos_[static_cast<size_t>(last)];
    pos_.pop_back();
    maybe_shrink(pos_);
    return;
  }
  const Loc l = loc_[static_cast<size_t>(slot)];
  if (l.chunk < 0)
    drop_pool_row(l.row);
  else
    drop_chunk_row(l.chunk, l.row);
  if (slot != last) {
    const Loc ml = loc_[static_cast<size_t>(last)];
    pos_[static_cast<size_t>(slot)] = pos_[static_cast<size_t>(last)];
    loc_[static_cast<size_t>(slot)] = ml;
    if (ml.chunk < 0)
      pool_owner_[static_cast<size_t>(ml.row)] = static_cast<int32_t>(slot);
    else
      chunks_[static_cast<size_t>(ml.chunk)].owner[static_cast<size_t>(ml.row)] =
          static_cast<int32_t>(slot);
  }
  pos_.pop_back();
  loc_.pop_back();
  maybe_shrink(pos_);
  maybe_shrink(loc_);
}

void HeadStore::gather(int kv, const std::vector<int32_t>& rows, std::vector<float>& buf) const {
  buf.resize(rows.size() * static_cast<size_t>(D_));
  for (size_t i = 0; i < rows.size(); ++i) {
    const int32_t r = rows[i];
    const int64_t p = pos_[static_cast<size_t>(pool_owner_[static_cast<size_t>(r)])];
    const int64_t si = p - stage_pos0_;
    float* dst = buf.data() + static_cast<int64_t>(i) * D_;
    if (stage_n_ > 0 && si >= 0 && si < stage_n_ && stage_ok_[static_cast<size_t>(si)]) {
      std::memcpy(dst, stage_[kv].data() + si * D_, sizeof(float) * static_cast<size_t>(D_));
    } else {
      fp16_to_fp32_n(reinterpret_cast<const uint16_t*>(pool_[kv].row(r)), dst, D_);
    }
  }
}

void HeadStore::remove_pool_rows(std::vector<int32_t> rows) {
  // Highest pool row first, so that the rows still to remove never move.
  std::sort(rows.begin(), rows.end(), std::greater<>());
  for (int32_t r : rows) drop_pool_row(r);
}

void HeadStore::encode_chunk(const std::vector<int32_t>& rows) {
  const int64_t n = static_cast<int64_t>(rows.size());
  int32_t c;
  if (!free_chunks_.empty()) {
    c = free_chunks_.back();
    free_chunks_.pop_back();
  } else {
    c = static_cast<int32_t>(chunks_.size());
    chunks_.emplace_back();
  }
  Chunk& ch = chunks_[static_cast<size_t>(c)];
  std::vector<float> buf;
  for (int kv = 0; kv < 2; ++kv) {
    gather(kv, rows, buf);
    RowCodec& cd = *codec_[kv];
    ch.params[kv].assign(static_cast<size_t>(cd.chunk_param_bytes(n)), 0);
    ch.codes[kv].assign(static_cast<size_t>(n * cd.row_bytes()), 0);
    cd.encode(buf.data(), n, ch.params[kv].empty() ? nullptr : ch.params[kv].data(),
              ch.codes[kv].data());
  }
  ch.stored.reset();
  ch.n = n;
  ch.owner.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t slot = pool_owner_[static_cast<size_t>(rows[static_cast<size_t>(i)])];
    ch.owner[static_cast<size_t>(i)] = slot;
  }
  // The slots now live in the chunk; then their window rows go.
  for (int64_t i = 0; i < n; ++i) {
    const int32_t slot = ch.owner[static_cast<size_t>(i)];
    loc_[static_cast<size_t>(slot)] = Loc{c, static_cast<int32_t>(i)};
  }
  std::vector<int32_t> sorted_rows = rows;
  std::sort(sorted_rows.begin(), sorted_rows.end(), std::greater<>());
  for (int32_t r : sorted_rows) {
    // drop_pool_row updates the location of the row it moves, which is still a window row
    // (rows being removed are taken highest first, so a moved row is never one of them).
    const int32_t last = static_cast<int32_t>(pool_owner_.size()) - 1;
    if (r != last) {
      for (int kv = 0; kv < 2; ++kv) pool_[kv].copy_row(last, r);
      const int32_t moved = pool_owner_[static_cast<size_t>(last)];
      pool_owner_[static_cast<size_t>(r)] = moved;
      loc_[static_cast<size_t>(moved)].row = r;
    }
    pool_owner_.pop_back();
    for (int kv = 0; kv < 2; ++kv) pool_[kv].pop_back();
  }
  for (int kv = 0; kv < 2; ++kv) pool_[kv].trim();
  maybe_shrink(pool_owner_);
}

void HeadStore::settle() {
  if (!chunked()) return;
  const RowCodec& k = *codec_[0];
  const int64_t chunk = k.chunk_rows(), keep = k.recent_rows(), sink = k.sink_rows();
  // Window rows that may be encoded (not sinks), oldest first.
  std::vector<int32_t> cand;
  for (size_t r = 0; r < pool_owner_.size(); ++r)
    if (pos_[static_cast<size_t>(pool_owner_[r])] >= sink) cand.push_back(static_cast<int32_t>(r));
  std::sort(cand.begin(), cand.end(), [&](int32_t a, int32_t b) {
    return pos_[static_cast<size_t>(pool_owner_[static_cast<size_t>(a)])] <
           pos_[static_cast<size_t>(pool_owner_[static_cast<size_t>(b)])];
  });
  int64_t n = static_cast<int64_t>(cand.size());
  std::vector<std::vector<int32_t>> plan;  // chunks to form, each a list of window rows
  int64_t used = 0;
  if (!codec_[0]->fitted() || !codec_[1]->fitted()) {
    if (n >= k.fit_rows() && n > 0) {
      // Fit on every candidate row, then encode them at once in even chunks, except the
      // recent_rows() newest.
      std::vector<float> buf;
      for (int kv = 0; kv < 2; ++kv) {
        gather(kv, cand, buf);
        codec_[kv]->fit(buf.data(), n);
      }
      const int64_t total = std::max<int64_t>(0, n - keep);
      if (total > 0) {
        const int64_t count = (total + chunk - 1) / chunk;
        const int64_t base = total / count, extra = total % count;
        for (int64_t i = 0; i < count; ++i) {
          const int64_t m = base + (i < extra ? 1 : 0);
          plan.emplace_back(cand.begin() + used, cand.begin() + used + m);
          used += m;
        }
      }
    }
  }
  if (codec_[0]->fitted() && codec_[1]->fitted()) {
    while (n - used - chunk >= keep) {
      plan.emplace_back(cand.begin() + used, cand.begin() + used + chunk);
      used += chunk;
    }
  }
  // Encoding a chunk moves window rows: translate each later plan's rows through the slots.
  std::vector<std::vector<int32_t>> plan_slots(plan.size());
  for (size_t i = 0; i < plan.size(); ++i)
    for (int32_t r : plan[i]) plan_slots[i].push_back(pool_owner_[static_cast<size_t>(r)]);
  if (!plan.empty()) ++generation_;
  for (size_t i = 0; i < plan.size(); ++i) {
    std::vector<int32_t> rows;
    for (int32_t s : plan_slots[i]) rows.push_back(loc_[static_cast<size_t>(s)].row);
    encode_chunk(rows);
  }
  // The staged input has served its purpose; a large one (a prefill) is released.
  stage_n_ = 0;
  std::fill(stage_ok_.begin(), stage_ok_.end(), 0);
  if (stage_ok_.capacity() > 64) {
    for (int kv = 0; kv < 2; ++kv) std::vector<float>().swap(stage_[kv]);
    std::vector<uint8_t>().swap(stage_ok_);
  }
}

namespace {

// How many of locs[0, limit) continue locs[0]'s run: the same chunk, rows locs[0].row + m. The
// (chunk, row) pairs are compared as 64-bit words, eight at a time where AVX-512 is there
// (decode scans every cached row of a chunked store twice per head and step).
template <class Loc>
int64_t run_length(const Loc* locs, int64_t limit) {
  static_assert(sizeof(Loc) == 8, "Loc: two 32-bit fields");
  const auto word = [](int32_t chunk, int32_t row) {
    return static_cast<uint64_t>(static_cast<uint32_t>(chunk)) |
           (static_cast<uint64_t>(static_cast<uint32_t>(row)) << 32);
  };
  const uint64_t base = word(locs[0].chunk, locs[0].row);
  int64_t m = 1;
#if defined(__AVX512F__)
  const __m512i lanes = _mm512_slli_epi64(_mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7), 32);
  for (; m + 8 <= limit; m += 8) {
    uint64_t got[8];
    std::memcpy(got, locs + m, sizeof(got));
    const __m512i want = _mm512_add_epi64(
        _mm512_set1_epi64(static_cast<long long>(base + (static_cast<uint64_t>(m) << 32))), lanes);
    const auto eq = static_cast<unsigned>(_mm512_cmpeq_epi64_mask(_mm512_loadu_si512(got), want));
    if (eq != 0xFFu) return m + std::countr_one(eq);
  }
#endif
  for (; m < limit; ++m) {
    uint64_t got;
    std::memcpy(&got, locs + m, sizeof(got));
    if (got != base + (static_cast<uint64_t>(m) << 32)) break;
  }
  return m;
}

}  // namespace

void HeadStore::prefetch_run(int kv, Loc next, int64_t rows, int32_t chunk_now) const {
  // Each chunk's parameters and codes are allocations of their own, so the hardware has no
  // stream to follow from one run into the next: the parameters' first read (chunk_ranges) and
  // the codes' first lines were misses taken one after another, per chunk, head and layer
  // (perf: chunk_ranges spent 78% of its samples on that first load). Asked for while the run
  // before is read, they have that run's time to arrive. The parameters (up to 1 KiB) only when
  // the next run is in another chunk; the codes of the next run's rows, up to 4 KiB (a whole
  // 128-row kvtc chunk at 32 bytes a row), so that a store cut into short runs by evictions asks
  // for no more than it reads. Random 1B-shaped Q4_K model, context 4096, two threads, kvtc's
  // decode tok/s over full's in one process (results/session33/kvtc_pair.cpp, the 7th of 12
  // rounds' ratios): 0.920, 0.905 and 0.906 before; 0.953 and 0.935 when the first version asked
  // for the parameters and 4 KiB from the next run's start whatever its length, 0.951 in this
  // form (with the next run's slot table and only 256 bytes of codes: 0.945 / 0.931). A
  // prefetch never faults and changes no result.
  if (next.chunk < 0) return;
  const auto ask = [](const void* p, int64_t bytes) {
    const auto* c = static_cast<const char*>(p);
    for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 0, 3);
  };
  const Chunk& ch = chunks_[static_cast<size_t>(next.chunk)];
  if (next.chunk != chunk_now) {
    const std::vector<uint8_t>& params = ch.params[kv];
    ask(params.data(), std::min<int64_t>(static_cast<int64_t>(params.size()), 1024));
  }
  const int64_t rb = codec_[kv]->row_bytes();
  ask(ch.codes[kv].data() + next.row * rb, std::min<int64_t>(rows * rb, 4096));
}

template <typename Fn>
void HeadStore::for_each_run(int kv, int64_t first, int64_t n, Fn&& fn) const {
  VQ_CHECK(first >= 0 && n >= 0 && first + n <= size(), InvalidArgument, "HeadStore: rows [", first,
           ", ", first + n, ") are outside [0, ", size(), ")");
  if (n == 0) return;
  const RowCodec& cd = *codec_[kv];
  const RowPages& pool = pool_[kv];
  if (!chunked()) {  // pool row i is slot i: runs end at page boundaries
    for (int64_t i = 0; i < n;) {
      const int64_t m = std::min(n - i, pool.run(first + i));
      fn(nullptr, pool.row(first + i), false, i, m);
      i += m;
    }
    return;
  }
  // the run that starts at slots[first + i]: where it lies, and how many rows it has
  const auto run_at = [&](int64_t i, Loc& l, int64_t& m) {
    l = loc_[static_cast<size_t>(first + i)];
    // window rows are contiguous only within one page
    const int64_t limit = l.chunk < 0 ? std::min(n - i, pool.run(l.row)) : n - i;
    m = run_length(loc_.data() + first + i, limit);
  };
  Loc l;
  int64_t m = 0;
  run_at(0, l, m);
  for (int64_t i = 0; i < n;) {
    Loc next;
    int64_t next_m = 0;
    if (i + m < n) {  // found before this run is read, so its first lines can be on their way
      run_at(i + m, next, next_m);
      prefetch_run(kv, next, next_m, l.chunk);
    }
    if (l.chunk < 0) {
      fn(nullptr, pool.row(l.row), true, i, m);
    } else {
      const Chunk& ch = chunks_[static_cast<size_t>(l.chunk)];
      fn(ch.params[kv].empty() ? nullptr : ch.params[kv].data(),
         ch.codes[kv].data() + l.row * cd.row_bytes(), false, i, m);
    }
    i += m;
    l = next;
    m = next_m;
  }
}

void HeadStore::read(int kv, int64_t first, int64_t n, float* out) const {
  const RowCodec& cd = *codec_[kv];
  for_each_run(kv, first, n,
               [&](const uint8_t* params, const uint8_t* codes, bool window, int64_t i, int64_t m) {
                 if (window)
                   fp16_to_fp32_n(reinterpret_cast<const uint16_t*>(codes), out + i * D_, m * D_);
                 else
                   cd.decode(params, codes, m, out + i * D_);
               });
}

void HeadStore::dot(int kv, int64_t first, int64_t n, const float* q, float* out) const {
  const RowCodec& cd = *codec_[kv];
  for_each_run(kv, first, n,
               [&](const uint8_t* params, const uint8_t* codes, bool window, int64_t i, int64_t m) {
                 if (window)
                   float_dot_rows(FloatRows::F16, codes, 2 * D_, m, D_, q, out + i);
                 else
                   cd.dot_rows(params, codes, m, q, out + i);
               });
}

void HeadStore::accumulate(int kv, int64_t first, int64_t n, const float* w, float* acc) const {
  const RowCodec& cd = *codec_[kv];
  if (const int64_t L = cd.latent_dim(); L > 0) {
    // Encoded rows summed in the codec's latent space over every chunk, mapped back once.
    thread_local std::vector<float> lat;
    lat.assign(static_cast<size_t>(L), 0.0f);
    bool any = false;
    for_each_run(
        kv, first, n,
        [&](const uint8_t* params, const uint8_t* codes, bool window, int64_t i, int64_t m) {
          if (window) {
            float_axpy_rows(FloatRows::F16, codes, 2 * D_, m, D_, w + i, acc);
          } else {
            cd.axpy_latent(params, codes, m, w + i, lat.data());
            any = true;
          }
        });
    if (any) cd.unproject_latent(lat.data(), acc);
    return;
  }
  for_each_run(kv, first, n,
               [&](const uint8_t* params, const uint8_t* codes, bool window, int64_t i, int64_t m) {
                 if (window)
                   float_axpy_rows(FloatRows::F16, codes, 2 * D_, m, D_, w + i, acc);
                 else
                   cd.axpy_rows(params, codes, m, w + i, acc);
               });
}

void HeadStore::dot_many(int kv, int64_t first, int64_t n, const float* qs, int64_t nq, float* out,
                         int64_t out_stride) const {
  const RowCodec& cd = *codec_[kv];
  for_each_run(kv, first, n,
               [&](const uint8_t* params, const uint8_t* codes, bool window, int64_t i, int64_t m) {
                 if (window) {
                   float_dot_rows_many(FloatRows::F16, codes, 2 * D_, m, D_, qs, nq, out + i,
                                       out_stride);
                 } else {
                   cd.dot_rows_many(params, codes, m, qs, nq, out + i, out_stride);
                 }
               });
}

void HeadStore::accumulate_many(int kv, int64_t first, int64_t n, const float* w, int64_t w_stride,
                                int64_t nw, float* acc) const {
  const RowCodec& cd = *codec_[kv];
  const int64_t L = cd.latent_dim();
  if (nw <= 1) {
    for (int64_t j = 0; j < nw; ++j) accumulate(kv, first, n, w + j * w_stride, acc + j * D_);
    return;
  }
  if (L <= 0) {  // rows added as they are stored, each unpacked once for every weight row
    for_each_run(
        kv, first, n,
        [&](const uint8_t* params, const uint8_t* codes, bool window, int64_t i, int64_t m) {
          if (window)
            float_axpy_rows_many(FloatRows::F16, codes, 2 * D_, m, D_, w + i, w_stride, nw, acc);
          else
            cd.axpy_rows_many(params, codes, m, w + i, w_stride, nw, acc);
        });
    return;
  }
  // As accumulate(): every query's latent sum over the encoded runs, mapped back once each.
  thread_local std::vector<float> lat;
  lat.assign(static_cast<size_t>(L * nw), 0.0f);
  bool any = false;
  for_each_run(kv, first, n,
               [&](const uint8_t* params, const uint8_t* codes, bool window, int64_t i, int64_t m) {
                 if (window) {
                   float_axpy_rows_many(FloatRows::F16, codes, 2 * D_, m, D_, w + i, w_stride, nw,
                                        acc);
                 } else {
                   cd.axpy_latent_many(params, codes, m, w + i, w_stride, nw, lat.data(), L);
                   any = true;
                 }
               });
  if (any)
    for (int64_t j = 0; j < nw; ++j) cd.unproject_latent(lat.data() + j * L, acc + j * D_);
}

StoreBytes HeadStore::bytes() const {
  StoreBytes b;
  if (!codec_[0]) return b;
  for (int kv = 0; kv < 2; ++kv) {
    b.content += pool_[kv].capacity_bytes();
    b.params += codec_[kv]->state_bytes();
    b.scratch += cap_bytes(stage_[kv]);
    b.external += codec_[kv]->external_bytes();
    b.stored += codec_[kv]->stored_header_bytes();
  }
  b.scratch += cap_bytes(stage_ok_);
  b.index += cap_bytes(pos_) + cap_bytes(loc_) + cap_bytes(pool_owner_) + cap_bytes(free_chunks_) +
             static_cast<int64_t>(chunks_.capacity() * sizeof(Chunk));
  const int64_t window = pool_rows();
  if (chunked()) {
    b.window_rows = window;
    b.stored += window * 2 * 2 * D_;
  } else {
    b.encoded_rows = window;
    b.stored += window * (codec_[0]->row_bytes() + codec_[1]->row_bytes());
  }
  for (const Chunk& ch : chunks_) {
    if (ch.n == 0) continue;
    ++b.chunks;
    b.encoded_rows += ch.n;
    b.index += cap_bytes(ch.owner);
    for (int kv = 0; kv < 2; ++kv) {
      b.content += cap_bytes(ch.codes[kv]);
      b.params += cap_bytes(ch.params[kv]);
    }
    int64_t stored = ch.stored.bytes.load(std::memory_order_relaxed);
    if (stored < 0) {
      stored = 0;
      for (int kv = 0; kv < 2; ++kv)
        stored += codec_[kv]->stored_chunk_bytes(
            ch.params[kv].empty() ? nullptr : ch.params[kv].data(), ch.codes[kv].data(), ch.n);
      ch.stored.bytes.store(stored, std::memory_order_relaxed);
    }
    b.stored += stored;
  }
  return b;
}

}  // namespace vq::store

// bench speed's eviction rows: the per-token timing harness and the rows it feeds.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "eval/bench_speed.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/npy.hpp"

namespace {

TEST(StreamTiming, RefusesAStreamLongerThanTheRowsGiven) {
  const int64_t n = 16, D = 8, tokens = 8;
  const auto k = vq::bench::realistic_kv(n + tokens - 1, D, 1, true);
  const auto v = vq::bench::realistic_kv(n + tokens, D, 2, false);
  try {
    vq::bench::stream_ns_per_token("h2o:budget=16,n_sink=1", k, v, n, D, tokens, 0);
    FAIL() << "a stream past the last key row was accepted";
  } catch (const vq::InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("192 values"), std::string::npos) << msg;  // (16 + 8) * 8 needed
    EXPECT_NE(msg.find("184 keys"), std::string::npos) << msg;
  }
  EXPECT_THROW(vq::bench::stream_ns_per_token("h2o:budget=16,n_sink=1", v, v, n, D, 0, 0),
               vq::InvalidArgument);
}

TEST(StreamTiming, TimesOneTokenUpdates) {
  const int64_t n = 32, D = 8, tokens = 16;
  const auto k = vq::bench::realistic_kv(n + tokens, D, 1, true);
  const auto v = vq::bench::realistic_kv(n + tokens, D, 2, false);
  for (const char* spec : {"full", "h2o:budget=32,n_sink=2", "curdkv:budget=32,n_sink=2"}) {
    const double ns = vq::bench::stream_ns_per_token(spec, k, v, n, D, tokens, 0);
    EXPECT_TRUE(std::isfinite(ns) && ns > 0) << spec << ": " << ns;
  }
}

TEST(StreamTiming, TimesUpdatesWithTrueQueries) {
  const int64_t n = 32, D = 8, tokens = 16, S = n + tokens, G = 2;
  const auto k = vq::bench::realistic_kv(S, D, 1, true);
  const auto v = vq::bench::realistic_kv(S, D, 2, false);
  std::vector<float> q(static_cast<size_t>(G * S * D), 0.5f);
  const double ns =
      vq::bench::stream_ns_per_token("curdkv:budget=32,n_sink=2", k, v, n, D, tokens, 0, &q, G);
  EXPECT_TRUE(std::isfinite(ns) && ns > 0) << ns;
  q.pop_back();
  try {
    vq::bench::stream_ns_per_token("curdkv:budget=32,n_sink=2", k, v, n, D, tokens, 0, &q, G);
    FAIL() << "queries one value short were accepted";
  } catch (const vq::InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("2 heads need 768 values; have 767"), std::string::npos) << msg;
  }
}

// The eviction group at a tiny size: every arm present once, interval arms timed over whole
// intervals (kvzip at budget 16 rescores every 4th eviction), each row's ratio to the step.
TEST(StreamTiming, EvictionRowsCoverEveryArm) {
  vq::bench::SpeedOptions o;
  o.ns = {16};
  o.dims = {8};
  o.min_seconds = 0;
  o.codec = o.attention = o.layer = o.generate = false;
  o.evict_methods = {"kvzip", "curdkv"};
  const auto rows = vq::bench::run_speed_bench(o);
  std::string names;
  for (const auto& r : rows) {
    EXPECT_EQ(r.group, "eviction");
    EXPECT_EQ(r.n, 16);
    EXPECT_TRUE(std::isfinite(r.value) && r.value > 0) << r.name;
    EXPECT_TRUE(std::isfinite(r.ratio) && r.ratio > 0) << r.name;
    if (r.name == "kvzip") {
      EXPECT_NE(r.note.find("rescore every 4 evictions"), std::string::npos) << r.note;
    }
    names += r.name + " ";
  }
  EXPECT_EQ(names,
            "attention_step full curdkv curdkv_refresh4 curdkv_fast curdkv_fast_refresh16 kvzip "
            "kvzip_rescore1 curdkv_reference ");
}

// Sizes the rows would generate data for are checked before anything is allocated, each
// refusal naming the value and its limit (a head dim of 0 used to crash, 1e11 tokens to throw
// bad_alloc).
TEST(StreamTiming, BadSizesAreRefusedNamingTheValue) {
  const auto refused = [](vq::bench::SpeedOptions o, const std::string& value) {
    o.codec = o.attention = o.generate = false;
    o.min_seconds = 0;
    o.evict_methods = {"h2o"};
    try {
      vq::bench::run_speed_bench(o);
      ADD_FAILURE() << value << ": accepted";
    } catch (const vq::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(value), std::string::npos) << e.what();
    }
  };
  vq::bench::SpeedOptions o;
  o.dims = {0};
  refused(o, "--dims 0 is outside [1, 1024]");
  o.dims = {-5};
  refused(o, "--dims -5 is outside [1, 1024]");
  o.dims = {64};
  o.ns = {100000000000};
  refused(o, "--ns 100000000000 is outside [8, 65536]");
  o.ns = {3};
  refused(o, "--ns 3 is outside [8, 65536]");
  o.ns = {65536};
  o.dims = {1024};
  refused(o, "n x D = 65536 x 1024 = 67108864 exceeds 8388608");
  o.ns = {16};
  o.dims = {8};
  o.min_seconds = std::nan("");
  o.layer = false;
  try {
    vq::bench::run_speed_bench(o);
    ADD_FAILURE() << "min_seconds NaN accepted";
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("min_seconds = nan"), std::string::npos) << e.what();
  }
  EXPECT_THROW(vq::bench::stream_ns_per_token("full", {}, {}, 0, 0, 1, 0), vq::InvalidArgument);
  EXPECT_THROW(vq::bench::realistic_kv(4, 0, 1, true), vq::InvalidArgument);
  // refused also when no row that reads them runs (attention only): accepted and then ignored,
  // a bad value would mislead
  vq::bench::SpeedOptions a;
  a.eviction = a.layer = a.codec = a.generate = false;
  a.ns = {-1};
  try {
    vq::bench::run_speed_bench(a);
    ADD_FAILURE() << "--ns -1 accepted with the attention rows only";
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--ns -1 is outside [8, 65536]"), std::string::npos)
        << e.what();
  }
}

// Head dims below 8 have fewer outlier channels: the generator used to scale channels 3 and D - 5
// whether or not they existed (memory corruption at D < 8). Every head dim from 1 on runs the
// eviction rows; D = 8 and up keep their old values.
TEST(StreamTiming, NarrowHeadsRunTheEvictionRows) {
  for (int64_t D = 1; D <= 8; ++D) {
    const auto k = vq::bench::realistic_kv(12, D, 7, true);
    ASSERT_EQ(k.size(), static_cast<size_t>(12 * D));
    for (float x : k) ASSERT_TRUE(std::isfinite(x)) << "D = " << D;
  }
  vq::bench::SpeedOptions o;
  o.ns = {8};
  o.dims = {1, 2, 5};
  o.min_seconds = 0;
  o.codec = o.attention = o.generate = false;
  o.evict_methods = {"curdkv", "h2o"};
  const auto rows = vq::bench::run_speed_bench(o);
  EXPECT_FALSE(rows.empty());
  for (const auto& r : rows) EXPECT_TRUE(std::isfinite(r.value) && r.value > 0) << r.name;
}

// kv_streams slices [L, 2, H, S, D] into (layer, head) streams, layer-major, keys then values,
// the first `tokens` tokens each: every value below encodes its own index, so a wrong offset shows.
TEST(StreamTiming, KvStreamsSliceEveryLayerAndHead) {
  const int64_t L = 3, H = 2, S = 5, D = 4;
  std::vector<float> x(static_cast<size_t>(L * 2 * H * S * D));
  const auto code = [](int64_t l, int64_t kv, int64_t h, int64_t s, int64_t d) {
    return static_cast<float>(l * 10000 + kv * 1000 + h * 100 + s * 10 + d);
  };
  size_t at = 0;
  for (int64_t l = 0; l < L; ++l)
    for (int64_t kv = 0; kv < 2; ++kv)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t d = 0; d < D; ++d) x[at++] = code(l, kv, h, s, d);
  const auto a = vq::npy_from_float(x.data(), {L, 2, H, S, D});
  const auto streams = vq::bench::kv_streams(a, "test", 3);
  ASSERT_EQ(streams.size(), static_cast<size_t>(L * H));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t h = 0; h < H; ++h) {
      const auto& st = streams[static_cast<size_t>(l * H + h)];
      ASSERT_EQ(st.k.size(), static_cast<size_t>(3 * D));
      ASSERT_EQ(st.v.size(), static_cast<size_t>(3 * D));
      for (int64_t s = 0; s < 3; ++s)
        for (int64_t d = 0; d < D; ++d) {
          EXPECT_EQ(st.k[static_cast<size_t>(s * D + d)], code(l, 0, h, s, d));
          EXPECT_EQ(st.v[static_cast<size_t>(s * D + d)], code(l, 1, h, s, d));
        }
    }
  EXPECT_THROW(vq::bench::kv_streams(a, "test", S + 1), vq::InvalidArgument);
  const std::vector<int64_t> ids(static_cast<size_t>(L * 2 * H * S * D), 1);
  try {
    vq::bench::kv_streams(vq::npy_from_int64(ids.data(), {L, 2, H, S, D}), "--kv ids.npy", 3);
    ADD_FAILURE() << "an integer array was accepted";
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--kv ids.npy: dtype int64 is not a floating-point"),
              std::string::npos)
        << e.what();
  }
}

// --kv: the eviction rows on every (layer, head) stream of a dump-kv file, at its head dim; a
// file too short for an n, or not shaped like dump-kv's output, is refused naming the numbers.
TEST(StreamTiming, RealKvStreamsFromADumpFile) {
  const int64_t L = 2, H = 2, S = 300, D = 8;
  std::vector<float> x;
  for (int64_t l = 0; l < L; ++l)
    for (int64_t kv = 0; kv < 2; ++kv)
      for (int64_t h = 0; h < H; ++h) {
        const auto s =
            vq::bench::realistic_kv(S, D, static_cast<uint64_t>(10 * l + 3 * kv + h), kv == 0);
        x.insert(x.end(), s.begin(), s.end());
      }
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("bench_speed_kv_" + std::to_string(::getpid()) + ".npy"))
                               .string();
  vq::write_npy(path, vq::npy_from_float(x.data(), {L, 2, H, S, D}));
  vq::bench::SpeedOptions o;
  o.ns = {16};
  o.dims = {64};  // the file's head dim is used instead
  o.min_seconds = 0;
  o.codec = o.attention = o.layer = o.generate = false;
  o.evict_methods = {"h2o"};
  o.kv_path = path;
  const auto rows = vq::bench::run_speed_bench(o);
  ASSERT_EQ(rows.size(), 3u);  // attention_step, full, h2o
  for (const auto& r : rows) {
    EXPECT_EQ(r.D, D);
    EXPECT_EQ(r.n, 16);
    EXPECT_TRUE(std::isfinite(r.value) && r.value > 0) << r.name;
  }
  EXPECT_NE(rows[0].note.find(": 2 layers x 2 KV heads"), std::string::npos) << rows[0].note;
  o.ns = {64};  // 64 cached + 256 streamed > 300
  try {
    vq::bench::run_speed_bench(o);
    ADD_FAILURE() << "n = 64 accepted with 300 tokens per stream";
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("n = 64 needs 320 tokens per stream (256 streamed "
                                         "after the n cached), the file holds 300"),
              std::string::npos)
        << e.what();
  }
  vq::write_npy(path, vq::npy_from_float(x.data(), {L * 2, H, S, D}));
  o.ns = {16};
  try {
    vq::bench::run_speed_bench(o);
    ADD_FAILURE() << "a 4-d array accepted";
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("shape [4, 2, 300, 8] is not dump-kv's"),
              std::string::npos)
        << e.what();
  }
  std::remove(path.c_str());
}

}  // namespace

// Block codecs encode and decode a block's heads as pieces of a parallel loop: every registered
// codec must write the same bytes and decode the same floats with 1, 2 or 3 threads, with one
// head per piece.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "core/thread_pool.hpp"
#include "veloxquant/codec.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/threads.hpp"

namespace {

struct Coded {
  std::vector<std::vector<uint8_t>> sections;
  std::vector<float> decoded;
};

Coded run(const std::string& spec, const std::vector<float>& x, int64_t H, int64_t S, int64_t D,
          int threads, int64_t piece) {
  vq::set_thread_count(threads);
  vq::set_min_piece_macs(piece);
  auto codec = vq::make_codec(spec, D);
  const vq::EncodedBlock blk = codec->encode(x.data(), H, S);
  Coded c;
  for (const auto& sec : blk.sections) c.sections.push_back(sec.bytes);
  c.decoded.resize(x.size());
  codec->decode(blk, c.decoded.data());
  return c;
}

}  // namespace

TEST(BlockCodecThreads, SameBytesForAnyThreadCount) {
  const int threads0 = vq::thread_count();
  const int64_t piece0 = vq::min_piece_macs();
  const int64_t H = 5, S = 300, D = 32;
  vq::Rng rng(3);
  std::vector<float> x(static_cast<size_t>(H * S * D));
  for (float& v : x) v = static_cast<float>(rng.normal());
  int checked = 0;
  for (const vq::MethodInfo& m : vq::methods()) {
    if (!m.make_codec) continue;
    SCOPED_TRACE(m.id);
    const Coded one = run(m.id, x, H, S, D, 1, piece0);
    for (int threads : {2, 3}) {
      const Coded got = run(m.id, x, H, S, D, threads, 1);
      EXPECT_EQ(got.sections, one.sections) << threads << " threads";
      EXPECT_EQ(std::memcmp(got.decoded.data(), one.decoded.data(), x.size() * 4), 0)
          << threads << " threads";
    }
    ++checked;
  }
  vq::set_thread_count(threads0);
  vq::set_min_piece_macs(piece0);
  EXPECT_GE(checked, 8);
}

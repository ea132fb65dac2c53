// kvzip: tokens scored by the largest attention a replay of the kept keys places on them;
// with probe=latest the rule is exactly tova. rescore=r replays at every r-th eviction only
// (rescore=1: every eviction; rescore=0, the default: eviction::auto_rescore's interval).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>

#include "eviction/eviction_cache.hpp"
#include "eviction/family_util.hpp"
#include "eviction/methods.hpp"
#include "test_util.hpp"
#include "veloxquant/errors.hpp"

namespace {

using famtest::Vec;

// Repeat-probe scores over `held`: max over probe rows i (every held key) of softmax_j(k_i . K).
Vec repeat_scores(const vq::Tensor& K, int64_t b, int64_t h, const std::vector<int64_t>& held) {
  Vec best(held.size(), 0.0);
  for (int64_t i : held) {
    const Vec a = famtest::probe_attention(K, b, h, held, {famtest::row(K, b, h, i)},
                                           std::numeric_limits<int64_t>::max());
    for (size_t j = 0; j < held.size(); ++j) best[j] = std::max(best[j], a[j]);
  }
  return best;
}

// Reference: each update appends its chunk; when over budget, one round over held + chunk
// removes the (T - budget) lowest (score, position) non-sinks and the survivors keep the round's
// scores. With r > 1, once a round has run, a single token that pushes the head over budget
// between rounds (fewer than r evictions since the last) arrives with score +inf and the lowest
// held score leaves instead; a chunk of several tokens always gets a round. r = 1 is the rule
// kvzip had before it had a rescore option (a round at every eviction).
std::vector<int64_t> repeat_reference(const vq::Tensor& K, int64_t b, int64_t h, int64_t budget,
                                      int64_t n_sink, const std::vector<int64_t>& chunks,
                                      int64_t r = 1) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<int64_t> held;
  Vec score;
  int64_t since = 0;
  int64_t s = 0;
  for (size_t c = 0; s < K.S(); ++c) {
    const int64_t n = std::min(chunks[c % chunks.size()], K.S() - s);
    const bool lazy = r > 1 && since > 0;
    for (int64_t t = s; t < s + n; ++t) {
      held.push_back(t);
      score.push_back(lazy ? inf : 0.0);
    }
    s += n;
    const int64_t excess = static_cast<int64_t>(held.size()) - budget;
    if (excess <= 0) continue;
    if (n == 1 && lazy && since < r) {
      since += 1;
      for (int64_t e = 0; e < excess; ++e) {
        const int64_t j = famtest::lowest(held, score, n_sink);
        if (j < 0) break;
        held.erase(held.begin() + j);
        score.erase(score.begin() + j);
      }
      continue;
    }
    since = 1;
    const Vec sc = repeat_scores(K, b, h, held);
    std::vector<size_t> idx;
    for (size_t j = 0; j < held.size(); ++j)
      if (held[j] >= n_sink) idx.push_back(j);
    std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
      return sc[x] < sc[y] || (sc[x] == sc[y] && held[x] < held[y]);
    });
    std::vector<char> drop(held.size(), 0);
    for (int64_t e = 0; e < excess && e < static_cast<int64_t>(idx.size()); ++e) drop[idx[e]] = 1;
    std::vector<int64_t> next;
    Vec next_score;
    for (size_t j = 0; j < held.size(); ++j)
      if (!drop[j]) {
        next.push_back(held[j]);
        next_score.push_back(sc[j]);
      }
    held = next;
    score = next_score;
  }
  std::sort(held.begin(), held.end());
  return held;
}

const vq::eviction::HeadState& state(const vq::KVCache& c, int64_t b = 0, int64_t h = 0) {
  return dynamic_cast<const vq::eviction::EvictionCache&>(c).head_state(b, h);
}

TEST(KVzip, LatestProbeEqualsTovaExactly) {
  uint64_t seed = 81;
  for (const char* opts :
       {"budget=8,n_sink=2,query=proxy", "budget=11,n_sink=0", "budget=6,n_sink=3"}) {
    for (const std::vector<int64_t>& chunks :
         {std::vector<int64_t>{1}, std::vector<int64_t>{25, 1, 4}}) {
      const auto K = vqtest::random_tensor(2, 2, 80, 8, seed++);
      const auto V = vqtest::random_tensor(2, 2, 80, 8, seed++);
      const auto Q = vqtest::random_tensor(2, 4, 80, 8, seed++);
      auto tova = vq::make_cache(std::string("tova:") + opts, 8);
      auto zip = vq::make_cache(std::string("kvzip:probe=latest,") + opts, 8);
      famtest::feed(*tova, K, V, &Q, chunks);
      famtest::feed(*zip, K, V, &Q, chunks);
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t h = 0; h < 2; ++h)
          EXPECT_EQ(famtest::kept(*zip, b, h), famtest::kept(*tova, b, h)) << opts;
    }
  }
}

TEST(KVzip, RepeatProbeMatchesTheReplayRule) {
  const auto K = vqtest::random_tensor(1, 2, 70, 8, 91);
  for (const std::vector<int64_t>& chunks :
       {std::vector<int64_t>{1}, std::vector<int64_t>{30, 1, 1, 5}}) {
    auto cache = vq::make_cache("kvzip:budget=12,n_sink=2,rescore=1", 8);
    famtest::feed(*cache, K, K, nullptr, chunks);
    for (int64_t h = 0; h < 2; ++h)
      EXPECT_EQ(famtest::kept(*cache, 0, h), repeat_reference(K, 0, h, 12, 2, chunks))
          << "first chunk " << chunks[0] << " head " << h;
  }
}

TEST(KVzip, RepeatProbeIsKeyBased) {
  // Values and supplied queries do not change the selection of the repeat probe.
  const auto K = vqtest::random_tensor(1, 1, 50, 8, 92);
  const auto V = vqtest::random_tensor(1, 1, 50, 8, 93);
  const auto Q = vqtest::random_tensor(1, 2, 50, 8, 94);
  auto a = vq::make_cache("kvzip:budget=9,n_sink=1", 8);
  auto b = vq::make_cache("kvzip:budget=9,n_sink=1", 8);
  famtest::feed(*a, K, K, nullptr, {1});
  famtest::feed(*b, K, V, &Q, {1});
  EXPECT_EQ(famtest::kept(*a), famtest::kept(*b));
}

TEST(KVzip, RepeatProbeLargeRoundUsesBlocks) {
  // More than one block of 128 probe rows in a single round (a 300-token prompt).
  const auto K = vqtest::random_tensor(1, 1, 300, 4, 95);
  auto cache = vq::make_cache("kvzip:budget=20,n_sink=1", 4);
  famtest::feed(*cache, K, K, nullptr, {300});
  EXPECT_EQ(famtest::kept(*cache), repeat_reference(K, 0, 0, 20, 1, {300}));
}

TEST(KVzip, RescoreIntervalMatchesTheReference) {
  // Decisions identical to the reference for several intervals, token by token and with chunks
  // (a chunk's round resets the interval); each interval ends somewhere other than rescore=1.
  const auto K = vqtest::random_tensor(1, 2, 90, 8, 96);
  for (int64_t r : {2, 3, 5}) {
    bool differ = false;
    for (const std::vector<int64_t>& chunks :
         {std::vector<int64_t>{1}, std::vector<int64_t>{30, 1, 1, 1, 1, 1, 1, 1, 5}}) {
      auto cache = vq::make_cache("kvzip:budget=14,n_sink=2,rescore=" + std::to_string(r), 8);
      famtest::feed(*cache, K, K, nullptr, chunks);
      for (int64_t h = 0; h < 2; ++h) {
        const auto ref = repeat_reference(K, 0, h, 14, 2, chunks, r);
        EXPECT_EQ(famtest::kept(*cache, 0, h), ref)
            << "rescore " << r << " first chunk " << chunks[0] << " head " << h;
        differ = differ || ref != repeat_reference(K, 0, h, 14, 2, chunks, 1);
      }
    }
    EXPECT_TRUE(differ) << "rescore " << r << " kept what rescore=1 keeps (the test is blind)";
  }
}

TEST(KVzip, RescoreReplaysOncePerIntervalAndKeepsNewcomers) {
  // One round every r-th eviction: right after a round every held score is finite; in between,
  // the e % r tokens that arrived since hold +inf and are all still kept. A prompt chunk that
  // overflows the budget is a round and restarts the count.
  const int64_t S = 70, D = 8, budget = 10, r = 4, prompt = 16;
  const auto K = vqtest::random_tensor(1, 1, S, D, 97);
  for (bool chunked : {false, true}) {
    auto cache = vq::make_cache("kvzip:budget=10,n_sink=1,rescore=4", D);
    const int64_t first = chunked ? prompt : 1;
    cache->update(K.slice_tokens(0, first), K.slice_tokens(0, first));
    // evictions since the stream first went over budget; the prompt's round counts as one
    int64_t e = chunked ? 0 : -1;
    for (int64_t s = first; s < S; ++s) {
      cache->update(K.slice_tokens(s, 1), K.slice_tokens(s, 1));
      ASSERT_LE(cache->kept(0, 0), budget);
      if (s + 1 <= budget) continue;
      e += 1;
      const auto& st = state(*cache);
      int64_t unscored = 0;
      for (int64_t j = 0; j < st.n; ++j) unscored += std::isinf(st.score[static_cast<size_t>(j)]);
      EXPECT_EQ(unscored, e % r) << "step " << s << (chunked ? " after a prompt" : "");
      const auto kept = famtest::kept(*cache);
      for (int64_t back = 0; back < e % r; ++back)
        EXPECT_NE(std::find(kept.begin(), kept.end(), s - back), kept.end())
            << "token " << s - back << " evicted before its first round (step " << s << ")";
    }
  }
}

TEST(KVzip, AutoRescoreFollowsTheCostModelWithinTheCap) {
  using vq::eviction::auto_rescore;
  using vq::eviction::RescoreCost;
  // kvzip: ceil(budget / 4); expected_attention: head_dim; both at most (budget - n_sink) / 2,
  // at least 1.
  EXPECT_EQ(auto_rescore(RescoreCost::Replay, 512, 4, 64), 128);
  EXPECT_EQ(auto_rescore(RescoreCost::Replay, 4096, 4, 128), 1024);
  EXPECT_EQ(auto_rescore(RescoreCost::Replay, 13, 0, 8), 4);
  EXPECT_EQ(auto_rescore(RescoreCost::Replay, 10, 4, 8), 3);  // cap (10 - 4) / 2 = 3
  EXPECT_EQ(auto_rescore(RescoreCost::Replay, 10, 6, 8), 2);  // ceil(10 / 4) = 3 > cap 2
  EXPECT_EQ(auto_rescore(RescoreCost::Replay, 1, 0, 8), 1);
  EXPECT_EQ(auto_rescore(RescoreCost::QuadraticForm, 512, 4, 64), 64);
  EXPECT_EQ(auto_rescore(RescoreCost::QuadraticForm, 4096, 4, 128), 128);
  EXPECT_EQ(auto_rescore(RescoreCost::QuadraticForm, 100, 4, 128), 48);  // cap
  EXPECT_EQ(auto_rescore(RescoreCost::QuadraticForm, 3, 2, 64), 1);      // cap 0 -> 1
  // The option: 0 (the default) resolves through the rule, other values stand.
  using vq::CacheConfig;
  using vq::eviction::rescore_interval;
  EXPECT_EQ(CacheConfig::parse("kvzip").get_int("rescore"), 0);
  EXPECT_EQ(CacheConfig::parse("expected_attention").get_int("rescore"), 0);
  EXPECT_EQ(rescore_interval(CacheConfig::parse("kvzip"), 64), 128);
  EXPECT_EQ(rescore_interval(CacheConfig::parse("kvzip:budget=100,n_sink=90"), 64), 5);
  EXPECT_EQ(rescore_interval(CacheConfig::parse("kvzip:rescore=7"), 64), 7);
  EXPECT_EQ(rescore_interval(CacheConfig::parse("kvzip:budget=8,rescore=700"), 64), 700);
  EXPECT_EQ(rescore_interval(CacheConfig::parse("expected_attention"), 64), 64);
  EXPECT_EQ(rescore_interval(CacheConfig::parse("expected_attention:budget=40,n_sink=0"), 64), 20);
}

TEST(KVzip, DefaultRescoreIsTheAutoInterval) {
  // The caches run the interval the rule names: the default decides as rescore=<auto> does.
  const auto K = vqtest::random_tensor(1, 2, 80, 8, 98);
  const int64_t r = vq::eviction::auto_rescore(vq::eviction::RescoreCost::Replay, 16, 2, 8);
  ASSERT_EQ(r, 4);
  auto dflt = vq::make_cache("kvzip:budget=16,n_sink=2", 8);
  auto expl = vq::make_cache("kvzip:budget=16,n_sink=2,rescore=4", 8);
  famtest::feed(*dflt, K, K, nullptr, {1});
  famtest::feed(*expl, K, K, nullptr, {1});
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_EQ(famtest::kept(*dflt, 0, h), famtest::kept(*expl, 0, h)) << "head " << h;
    EXPECT_EQ(famtest::kept(*dflt, 0, h), repeat_reference(K, 0, h, 16, 2, {1}, 4));
  }
}

TEST(KVzip, RescoreOptionRangeErrorsNameTheValueAndTheLimit) {
  for (const auto& [spec, value, limit] :
       {std::tuple<std::string, std::string, std::string>{"kvzip:rescore=-1", "-1", "[0, 1048576]"},
        {"kvzip:rescore=1048577", "1048577", "[0, 1048576]"},
        {"expected_attention:rescore=-3", "-3", "[0, 1048576]"},
        {"expected_attention:rescore=2000000", "2000000", "[0, 1048576]"}}) {
    try {
      (void)vq::CacheConfig::parse(spec);
      ADD_FAILURE() << spec << " was accepted";
    } catch (const vq::InvalidArgument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("rescore"), std::string::npos) << msg;
      EXPECT_NE(msg.find(value), std::string::npos) << msg;
      EXPECT_NE(msg.find(limit), std::string::npos) << msg;
    }
  }
  EXPECT_NO_THROW(vq::CacheConfig::parse("kvzip:rescore=0"));
  EXPECT_NO_THROW(vq::CacheConfig::parse("kvzip:rescore=1048576"));
}

}  // namespace

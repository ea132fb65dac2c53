#include <gtest/gtest.h>

#include "veloxquant/config.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"

using vq::CacheConfig;

namespace {
std::string error_of(const std::string& spec) {
  try {
    CacheConfig::parse(spec);
  } catch (const vq::InvalidArgument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, ParsesAndPrintsBackTheSameString) {
  const std::string spec = "curdkv:budget=512,n_sink=4,rank_cap=16";
  CacheConfig c = CacheConfig::parse(spec);
  EXPECT_EQ(c.method(), "curdkv");
  EXPECT_EQ(c.get_int("budget"), 512);
  EXPECT_EQ(c.get_int("n_sink"), 4);
  EXPECT_EQ(c.get_int("rank_cap"), 16);
  EXPECT_EQ(c.to_string(), spec);
  EXPECT_EQ(CacheConfig::parse(c.to_string()), c);
}

TEST(Config, CanonicalOrderAndDefaults) {
  CacheConfig c = CacheConfig::parse(" h2o : decay=0.5 , budget=64 ");
  EXPECT_EQ(c.to_string(), "h2o:budget=64,decay=0.5");
  EXPECT_FALSE(c.is_set("n_sink"));
  EXPECT_EQ(c.get_int("n_sink"), 4);
  EXPECT_EQ(CacheConfig::parse(c.to_string(true)).to_string(true), c.to_string(true));
  EXPECT_EQ(CacheConfig::parse("full").to_string(), "full");
  EXPECT_EQ(CacheConfig::parse("h2o:").to_string(), "h2o");
}

TEST(Config, EveryMethodsDefaultsRoundTrip) {
  for (const auto& m : vq::methods()) {
    CacheConfig c = CacheConfig::defaults(m.id);
    const std::string all = c.to_string(true);
    CacheConfig back = CacheConfig::parse(all);
    EXPECT_EQ(back.to_string(true), all) << m.id;
    EXPECT_EQ(CacheConfig::parse(back.to_string()).to_string(), back.to_string()) << m.id;
  }
}

TEST(Config, RejectsUnknownMethodListingKnownOnes) {
  const std::string e = error_of("nosuch:budget=4");
  EXPECT_NE(e.find("unknown method 'nosuch'"), std::string::npos) << e;
  EXPECT_NE(e.find("curdkv"), std::string::npos) << e;
}

TEST(Config, RejectsUnknownOptionNamingIt) {
  const std::string e = error_of("curdkv:budgett=4");
  EXPECT_NE(e.find("unknown option 'budgett'"), std::string::npos) << e;
  EXPECT_NE(e.find("budget"), std::string::npos) << e;
}

TEST(Config, RejectsOutOfRangeNamingOptionValueAndRange) {
  const std::string e = error_of("curdkv:rank_cap=0");
  EXPECT_NE(e.find("rank_cap"), std::string::npos) << e;
  EXPECT_NE(e.find("0"), std::string::npos) << e;
  EXPECT_NE(e.find("[1, 65536]"), std::string::npos) << e;
  EXPECT_NE(error_of("h2o:decay=1.5").find("[0, 1]"), std::string::npos);
}

TEST(Config, RejectsMalformedValues) {
  EXPECT_NE(error_of("curdkv:budget=abc").find("expects an integer"), std::string::npos);
  EXPECT_NE(error_of("curdkv:budget=12x").find("expects an integer"), std::string::npos);
  EXPECT_NE(error_of("curdkv:budget").find("key=value"), std::string::npos);
  EXPECT_NE(error_of("curdkv:budget=8,,n_sink=2").find("stray comma"), std::string::npos);
  EXPECT_NE(error_of("h2o:decay=nan").find("decay"), std::string::npos);
  EXPECT_NE(error_of("curdkv:score=max").find("cumulative|mean"), std::string::npos);
  EXPECT_NE(error_of("curdkv:budget=8,budget=9").find("twice"), std::string::npos);
  EXPECT_NE(error_of("").find("empty"), std::string::npos);
}

TEST(Config, CurdkvRejectsSinksFillingTheBudget) {
  const std::string e = error_of("curdkv:budget=4,n_sink=4");
  EXPECT_NE(e.find("n_sink = 4"), std::string::npos) << e;
  EXPECT_NE(e.find("budget = 4"), std::string::npos) << e;
  EXPECT_NO_THROW(CacheConfig::parse("curdkv:budget=4,n_sink=0"));
  EXPECT_NO_THROW(CacheConfig::parse("curdkv:budget=5,n_sink=4"));
}

TEST(Config, SetValidatesLikeParse) {
  CacheConfig c = CacheConfig::defaults("h2o");
  c.set("budget", "32");
  EXPECT_EQ(c.to_string(), "h2o:budget=32");
  EXPECT_THROW(c.set("budget", "-1"), vq::InvalidArgument);
  EXPECT_THROW(c.get_float("budget"), vq::InvalidArgument);  // wrong type
}

TEST(Registry, EveryMethodIsWellFormed) {
  for (const auto& m : vq::methods()) {
    EXPECT_FALSE(m.id.empty());
    EXPECT_FALSE(m.description.empty()) << m.id;
    // An eviction method registers its cache (a policy), a codec its resident row codec; the
    // storage form (make_codec, .vqkv) is optional (bf16 has none).
    if (m.family == vq::Family::Eviction) {
      EXPECT_TRUE(static_cast<bool>(m.make_cache)) << m.id;
      EXPECT_FALSE(static_cast<bool>(m.make_row_codec)) << m.id;
    } else {
      EXPECT_TRUE(static_cast<bool>(m.make_row_codec)) << m.id;
      EXPECT_FALSE(static_cast<bool>(m.make_cache)) << m.id;
      EXPECT_EQ(static_cast<bool>(m.make_codec), m.id != "bf16" && m.id != "f32") << m.id;
    }
    for (const auto& o : m.options) EXPECT_FALSE(o.help.empty()) << m.id << "." << o.name;
    EXPECT_EQ(&vq::find_method(m.id), &m);
  }
}

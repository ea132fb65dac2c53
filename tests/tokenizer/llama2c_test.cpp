#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "model/model_test_util.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"

namespace {

using vqtest::TempFile;

// llama2.c's encode, transcribed as plainly as possible: character pieces (or byte fallback),
// then a full rescan for the best-scoring pair after every merge. The fast heap version must
// produce the same ids.
std::vector<int32_t> naive_encode(const vq::Tokenizer& t, const std::string& text) {
  std::vector<int32_t> tok{vq::Tokenizer::kBos};
  if (text.empty()) return tok;
  const std::string s = " " + text;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    while (i + len < s.size() && (static_cast<unsigned char>(s[i + len]) & 0xC0) == 0x80 && len < 4)
      ++len;
    const int32_t id = t.find(s.substr(i, len));
    if (id >= 0) {
      tok.push_back(id);
    } else {
      for (size_t j = 0; j < len; ++j)
        tok.push_back(t.has_byte_fallback() ? static_cast<unsigned char>(s[i + j]) + 3
                                            : vq::Tokenizer::kUnk);
    }
    i += len;
  }
  while (true) {
    float best = -1e10f;
    int best_id = -1;
    size_t best_i = 0;
    for (size_t i = 1; i + 1 < tok.size(); ++i) {  // BOS takes part in no merge
      const int32_t id = t.find(t.piece(tok[i]) + t.piece(tok[i + 1]));
      if (id >= 0 && t.score(id) > best) {
        best = t.score(id);
        best_id = id;
        best_i = i;
      }
    }
    if (best_id < 0) break;
    tok[best_i] = best_id;
    tok.erase(tok.begin() + static_cast<std::ptrdiff_t>(best_i) + 1);
  }
  return tok;
}

// A toy vocabulary with byte fallback: <unk>, BOS, EOS, 256 byte pieces, then merges.
vq::Tokenizer toy_tokenizer() {
  std::vector<std::string> p = {"<unk>", "\n<s>\n", "\n</s>\n"};
  std::vector<float> s = {0, 0, 0};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    p.push_back(buf);
    s.push_back(0);
  }
  const std::vector<std::pair<std::string, float>> extra = {
      {" ", -1},  {"a", -2},   {"b", -3},   {"c", -4}, {"ab", -5},  {"bc", -5},  // tie: ab vs bc
      {" a", -6}, {"abc", -7}, {" ab", -8}, {"é", -9}, {"cc", -10}, {"ccc", -11}};
  for (const auto& [piece, score] : extra) {
    p.push_back(piece);
    s.push_back(score);
  }
  return vq::Tokenizer::from_pieces(p, s);
}

std::string read_file(const std::string& path, size_t max_bytes) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  std::string s = os.str();
  if (s.size() > max_bytes) s.resize(max_bytes);
  return s;
}

TEST(Tokenizer, MergesByScoreLeftmostOnTies) {
  const vq::Tokenizer t = toy_tokenizer();
  ASSERT_TRUE(t.has_byte_fallback());
  // "abc": ab and bc tie at -5, leftmost (ab) wins; then " "+"ab" -> " ab"(-8) vs "ab"+"c" no
  // piece "abc"? "abc" exists (-7) and beats " ab" (-8).
  const auto ids = t.encode("abc");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], vq::Tokenizer::kBos);
  EXPECT_EQ(t.piece(ids[1]), " ");
  EXPECT_EQ(t.piece(ids[2]), "abc");
  EXPECT_EQ(t.encode("abc"), naive_encode(t, "abc"));
  EXPECT_EQ(t.decode(ids), "abc");
}

TEST(Tokenizer, ByteFallbackForMissingCharactersAndUtf8Grouping) {
  const vq::Tokenizer t = toy_tokenizer();
  const std::string text =
      "a\xE2\x82\xAC"
      "z\xC3\xA9";  // a, euro sign (absent), z (absent), é
  const auto ids = t.encode(text, false);
  const std::vector<std::string> want = {" a", "<0xE2>", "<0x82>", "<0xAC>", "<0x7A>", "é"};
  ASSERT_EQ(ids.size(), want.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(t.piece(ids[i]), want[i]) << i;
  EXPECT_EQ(ids[1], 0xE2 + 3);
  EXPECT_EQ(t.decode(ids), text);
}

TEST(Tokenizer, NoByteFallbackMapsToUnk) {
  const vq::Tokenizer t =
      vq::Tokenizer::from_pieces({"<unk>", "<s>", "</s>", " ", "a"}, {0, 0, 0, -1, -2});
  EXPECT_FALSE(t.has_byte_fallback());
  const auto ids = t.encode("a\n", true);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 4, 0}));
}

TEST(Tokenizer, BosEosAndEmptyText) {
  const vq::Tokenizer t = toy_tokenizer();
  EXPECT_EQ(t.encode("", true, false), (std::vector<int32_t>{1}));
  EXPECT_EQ(t.encode("", false, true), (std::vector<int32_t>{2}));
  EXPECT_TRUE(t.encode("", false, false).empty());
  EXPECT_EQ(t.encode("a", true, true).back(), 2);
  EXPECT_EQ(t.decode_piece(vq::Tokenizer::kBos, t.find(" a")), "a");  // dummy prefix dropped
  EXPECT_EQ(t.decode_piece(5, t.find(" a")), " a");
  EXPECT_EQ(t.decode_piece(5, vq::Tokenizer::kBos), "");
  EXPECT_THROW(t.decode_piece(0, 100000), vq::InvalidArgument);
}

TEST(Tokenizer, HeapMergesMatchTheNaiveRescanOnRandomText) {
  const vq::Tokenizer t = toy_tokenizer();
  vq::Rng rng(11);
  const char* alphabet[] = {"a", "b", "c", " ", "é", "z", "\n", "cc"};
  for (int trial = 0; trial < 200; ++trial) {
    std::string s;
    const int n = static_cast<int>(rng.below(40));
    for (int i = 0; i < n; ++i) s += alphabet[rng.below(8)];
    ASSERT_EQ(t.encode(s), naive_encode(t, s)) << "text '" << s << "'";
    ASSERT_EQ(t.decode(t.encode(s)), s);
  }
}

TEST(Tokenizer, LoadRejectsBrokenFiles) {
  EXPECT_THROW(vq::Tokenizer::load("/nonexistent/tok.bin"), vq::IoError);
  TempFile f("tok.bin");
  auto put = [](std::vector<char>& b, const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    b.insert(b.end(), c, c + n);
  };
  std::vector<char> good;
  const int32_t max_len = 6;
  put(good, &max_len, 4);
  for (const std::string piece : {"<unk>", "\n<s>\n", "\n</s>\n", "ab"}) {
    const float score = -1;
    const int32_t len = static_cast<int32_t>(piece.size());
    put(good, &score, 4);
    put(good, &len, 4);
    put(good, piece.data(), piece.size());
  }
  f.write(good);
  EXPECT_EQ(vq::Tokenizer::load(f.path()).vocab_size(), 4);
  EXPECT_EQ(vq::Tokenizer::load(f.path(), 4).piece(3), "ab");
  EXPECT_THROW(vq::Tokenizer::load(f.path(), 5), vq::FormatError);  // too few pieces
  EXPECT_THROW(vq::Tokenizer::load(f.path(), 3), vq::FormatError);  // bytes left over
  std::vector<char> bad(good.begin(), good.end() - 1);              // truncated piece
  f.write(bad);
  EXPECT_THROW(vq::Tokenizer::load(f.path()), vq::FormatError);
  bad = good;
  const int32_t huge = 1 << 30;
  std::memcpy(bad.data() + 4 + 4, &huge, 4);  // first piece length
  f.write(bad);
  EXPECT_THROW(vq::Tokenizer::load(f.path()), vq::FormatError);
  bad = good;
  const int32_t zero = 0;
  std::memcpy(bad.data(), &zero, 4);  // max_token_length
  f.write(bad);
  EXPECT_THROW(vq::Tokenizer::load(f.path()), vq::FormatError);
}

TEST(Tokenizer, Tok512RoundTripsTheValidationText) {
  VQ_REQUIRE_MODEL_FILE(tok_path, "tok512.bin");
  VQ_REQUIRE_MODEL_FILE(text_path, "tinystories-val.txt");
  const vq::Tokenizer t = vq::Tokenizer::load(tok_path, 512);
  EXPECT_TRUE(t.has_byte_fallback());
  EXPECT_EQ(t.max_token_length(), 7);
  const std::string text = read_file(text_path, 200000);
  const auto ids = t.encode(text);
  EXPECT_EQ(ids.front(), vq::Tokenizer::kBos);
  EXPECT_LT(ids.size(), text.size() / 2);  // merges happen (roughly 3+ bytes per token)
  EXPECT_EQ(t.decode(std::vector<int32_t>(ids.begin() + 1, ids.end())), text);
  // The fast encoder agrees with the naive llama2.c loop on real text.
  const std::string chunk = text.substr(0, 1500);
  EXPECT_EQ(t.encode(chunk), naive_encode(t, chunk));
}

TEST(Tokenizer, Tok105EncodesCharacterLevel) {
  VQ_REQUIRE_MODEL_FILE(tok_path, "tok105.bin");
  const vq::Tokenizer t = vq::Tokenizer::load(tok_path, 105);
  EXPECT_FALSE(t.has_byte_fallback());
  const std::string s = "Once upon a time, there was a little girl named Lily.";
  const auto ids = t.encode(s);
  EXPECT_EQ(ids, naive_encode(t, s));
  EXPECT_EQ(t.decode(std::vector<int32_t>(ids.begin() + 1, ids.end())), s);
}

}  // namespace

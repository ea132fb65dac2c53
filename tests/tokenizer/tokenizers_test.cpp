// Tokenizers from model files: pre-tokenizer splits, GGUF vocabularies built by hand (SPM byte
// fallback, user-defined vs control tokens, refusals), tokenizer.json against the GGUF gpt2
// golden results, SentencePiece and the llama2.c tokenizer against each other, the CLI.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "formats/file_writers.hpp"
#include "model/model_test_util.hpp"
#include "tokenizer/normalize.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/gguf.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/tokenizers.hpp"

namespace {

namespace fs = std::filesystem;
using Pieces = std::vector<std::string>;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

TEST(Pretokenizer, KnownSplits) {
  EXPECT_EQ(vq::pretokenize("gpt-2", "Hello world's 123  x"),
            (Pieces{"Hello", " world", "'s", " 123", " ", " x"}));
  EXPECT_EQ(vq::pretokenize("llama3", "12345 abc\n\nHi"),
            (Pieces{"123", "45", " abc", "\n\n", "Hi"}));
  EXPECT_EQ(vq::pretokenize("llama-bpe", "I'M ok"), (Pieces{"I", "'M", " ok"}));
  EXPECT_EQ(vq::pretokenize("qwen2", "x12345"), (Pieces{"x", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(vq::pretokenize("starcoder", "ab12"), (Pieces{"ab", "1", "2"}));
  EXPECT_EQ(vq::pretokenize("refact", "ab12"), (Pieces{"ab", "1", "2"}));
  EXPECT_EQ(vq::pretokenize("falcon", "1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(vq::pretokenize("deepseek-coder", "a\nb 12"), (Pieces{"a", "\n", "b", " ", "1", "2"}));
  EXPECT_EQ(vq::pretokenize("deepseek-llm", "Hi 42!"), (Pieces{"Hi", " ", "42", "!"}));
  EXPECT_EQ(vq::pretokenize("default", "a, b"), (Pieces{"a", ",", " b"}));
  // Unicode letters and numbers by property: Cyrillic, CJK and Devanagari digits.
  EXPECT_EQ(vq::pretokenize("gpt-2", "Привет мир ४२"), (Pieces{"Привет", " мир", " ४२"}));
}

TEST(Pretokenizer, EveryNamePreservesTheTextAndUnknownOnesAreRefused) {
  const std::string text =
      "Hello, Wörld! 1234567 \t\n  ‘quotes’ 中文字符 한국어 ½ 🦙 x'll\r\n end  ";
  for (const std::string& pre : vq::supported_gguf_pretokenizers()) {
    std::string joined;
    for (const std::string& p : vq::pretokenize(pre, text)) {
      EXPECT_FALSE(p.empty()) << pre;
      joined += p;
    }
    EXPECT_EQ(joined, text) << pre;
  }
  for (const char* need :
       {"default", "gpt-2", "llama3", "llama-bpe", "qwen2", "falcon", "starcoder", "refact",
        "deepseek-llm", "deepseek-coder", "mpt", "gpt-neox"}) {
    const auto v = vq::supported_gguf_pretokenizers();
    EXPECT_NE(std::find(v.begin(), v.end(), need), v.end()) << need;
  }
  try {
    vq::pretokenize("chatglm-bpe", "x");
    ADD_FAILURE() << "accepted";
  } catch (const vq::FormatError& e) {
    EXPECT_NE(
        std::string(e.what()).find("'chatglm-bpe' is not supported (supported: default, gpt-2"),
        std::string::npos)
        << e.what();
  }
}

// A tiny SPM vocabulary written as a GGUF: merges by score, byte fallback, a user-defined token
// that is matched in text and a control token that is not (unless parse_special).
vqtest::Bytes tiny_spm_gguf(const std::string& model = "llama", int space_prefix = -1) {
  vqtest::GgufWriter w;
  if (space_prefix >= 0)
    w.kv<uint8_t>("tokenizer.ggml.add_space_prefix", 7, static_cast<uint8_t>(space_prefix));
  std::vector<std::string> tokens = {"<unk>",
                                     "<s>",
                                     "</s>",
                                     "\xE2\x96\x81",
                                     "a",
                                     "b",
                                     "ab",
                                     "\xE2\x96\x81"
                                     "ab",
                                     "<0x63>",
                                     "<0x0A>",
                                     "[U]"};
  std::vector<float> scores = {0, 0, 0, -1, -2, -2, -0.5f, -0.1f, 0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3, 1, 1, 1, 1, 1, 6, 6, 4};
  w.kv_string("tokenizer.ggml.model", model);
  w.kv_string_array("tokenizer.ggml.tokens", tokens);
  w.kv_array<float>("tokenizer.ggml.scores", 6, scores);
  w.kv_array<int32_t>("tokenizer.ggml.token_type", 5, types);
  w.kv<uint32_t>("tokenizer.ggml.bos_token_id", 4, 1);
  w.kv<uint32_t>("tokenizer.ggml.eos_token_id", 4, 2);
  return w.build();
}

std::unique_ptr<vq::TextTokenizer> from_bytes(const vqtest::Bytes& b) {
  return vq::tokenizer_from_gguf(
      vq::GgufFile::parse(vq::MappedFile::from_bytes(b.data(), b.size(), "v.gguf")));
}

TEST(GgufVocab, SpmMergesByScoreWithByteFallbackAndSpecials) {
  const auto t = from_bytes(tiny_spm_gguf());
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->encode("ab", false), (std::vector<int32_t>{7}));  // "▁ab"
  EXPECT_EQ(t->encode("ab", true), (std::vector<int32_t>{1, 7}));
  EXPECT_EQ(t->encode("abc\n", false), (std::vector<int32_t>{7, 8, 9}));  // c, \n by bytes
  EXPECT_EQ(t->encode("a ab", false), (std::vector<int32_t>{3, 4, 7}));
  // [U] (user-defined) is always matched; the text after it gets the space prefix again.
  EXPECT_EQ(t->encode("[U]ab", false), (std::vector<int32_t>{10, 7}));
  // <s> (control) is plain text unless parse_special.
  EXPECT_EQ(t->encode("<s>", false, true), (std::vector<int32_t>{1}));
  EXPECT_NE(t->encode("<s>", false, false), (std::vector<int32_t>{1}));
  EXPECT_EQ(t->encode("", false), (std::vector<int32_t>{}));
  // The dummy-prefix space is dropped at the start of the text only: after BOS too, and a
  // user-defined token's own text keeps the space encode put after it.
  EXPECT_EQ(t->decode(t->encode("ab abc\n", false)), "ab abc\n");
  EXPECT_EQ(t->decode(t->encode("ab abc\n", true)), "ab abc\n");
  EXPECT_EQ(t->decode({7, 7}), "ab ab");
  EXPECT_EQ(t->decode(t->encode("[U]ab", false)), "[U] ab");
  EXPECT_THROW(t->decode({99}), vq::InvalidArgument);
}

// Without a dummy prefix (tokenizer.ggml.add_space_prefix = false) nothing is added, so a
// leading space that decodes from the first piece is the text's own and stays.
TEST(GgufVocab, SpmWithoutSpacePrefixKeepsLeadingSpace) {
  const auto t = from_bytes(tiny_spm_gguf("llama", 0));
  EXPECT_EQ(t->encode("ab", false), (std::vector<int32_t>{6}));  // "ab", no "▁"
  EXPECT_EQ(t->decode({7}), " ab");
  EXPECT_EQ(from_bytes(tiny_spm_gguf("llama", 1))->decode({7}), "ab");
}

TEST(GgufVocab, RefusalsNameTheProblem) {
  auto msg = [](const vqtest::Bytes& b) {
    try {
      from_bytes(b);
    } catch (const vq::FormatError& e) {
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  EXPECT_NE(msg(tiny_spm_gguf("bert"))
                .find("tokenizer.ggml.model 'bert' is not supported (supported: llama, gpt2)"),
            std::string::npos);
  vqtest::GgufWriter none;
  none.kv_string("general.architecture", "llama");
  EXPECT_NE(msg(none.build()).find("has no tokenizer"), std::string::npos);
  EXPECT_NE(msg(none.build()).find("--tokenizer"), std::string::npos);
  vqtest::GgufWriter w;
  w.kv_string("tokenizer.ggml.model", "llama");
  w.kv_string_array("tokenizer.ggml.tokens", {"a", "b"});
  w.kv_array<float>("tokenizer.ggml.scores", 6, {0.0f});
  EXPECT_NE(msg(w.build()).find("tokenizer.ggml.scores has 1 entries for 2 tokens"),
            std::string::npos);
  vqtest::GgufWriter b;
  b.kv_string("tokenizer.ggml.model", "llama");
  b.kv_string_array("tokenizer.ggml.tokens", {"a", "b"});
  b.kv_array<float>("tokenizer.ggml.scores", 6, {0.0f, 0.0f});
  b.kv<uint32_t>("tokenizer.ggml.bos_token_id", 4, 7);
  EXPECT_NE(msg(b.build()).find("tokenizer.ggml.bos_token_id = 7 is outside the vocabulary [0, 2)"),
            std::string::npos);
  vqtest::GgufWriter g;
  g.kv_string("tokenizer.ggml.model", "gpt2");
  g.kv_string("tokenizer.ggml.pre", "tekken-x");
  g.kv_string_array("tokenizer.ggml.tokens", {"a", "b"});
  g.kv_string_array("tokenizer.ggml.merges", {"a b"});
  EXPECT_NE(msg(g.build()).find("tokenizer.ggml.pre 'tekken-x' is not supported"),
            std::string::npos);
}

// tokenizer.json built from the GPT-2 GGUF vocabulary: same ids as the golden file.
TEST(HfTokenizerJson, ByteLevelBpeMatchesTheGgufGolden) {
  const std::string path = vq::locate_vocab_file("ggml-vocab-gpt-2.gguf");
  if (path.empty()) GTEST_SKIP() << "ggml-vocab-gpt-2.gguf not found";
  const vq::GgufFile g = vq::GgufFile::open(path);
  const auto tokens = g.get("tokenizer.ggml.tokens").as_string_array("t");
  const auto merges = g.get("tokenizer.ggml.merges").as_string_array("m");
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] != "<|endoftext|>") vocab[tokens[i]] = i;
  nlohmann::json j = {
      {"version", "1.0"},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  const fs::path dir = fs::temp_directory_path() / ("vq_hf_tok_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "tokenizer.json");
    f << j.dump();
  }
  const auto hf = vq::load_tokenizer(dir.string());
  const auto gg = vq::tokenizer_from_gguf(g);
  const std::string inp = slurp(path + ".inp");
  size_t start = 0, n = 0;
  const std::string sep = "\n__ggml_vocab_test__\n";
  while (true) {
    const size_t hit = inp.find(sep, start);
    if (hit == std::string::npos) break;
    const std::string s = inp.substr(start, hit - start);
    EXPECT_EQ(hf->encode(s, false), gg->encode(s, false)) << s;
    start = hit + sep.size();
    ++n;
  }
  EXPECT_GT(n, 40u);
  EXPECT_EQ(hf->encode("a<|endoftext|>", false, true).back(), 50256);
  EXPECT_NE(hf->encode("a<|endoftext|>", false, false).back(), 50256);
  fs::remove_all(dir);
}

TEST(HfTokenizerJson, UnsupportedPiecesAreRefusedByName) {
  const fs::path dir = fs::temp_directory_path() / ("vq_hf_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto msg = [&](const nlohmann::json& j) {
    {
      std::ofstream f(dir / "tokenizer.json");
      f << j.dump();
    }
    try {
      vq::load_tokenizer((dir / "tokenizer.json").string());
    } catch (const vq::FormatError& e) {
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  nlohmann::json base = {
      {"pre_tokenizer", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", nlohmann::json::array()}}}};
  EXPECT_EQ(msg(base), "<accepted>");
  auto wp = base;
  wp["model"]["type"] = "WordPiece";
  EXPECT_NE(msg(wp).find("model type WordPiece is not supported"), std::string::npos);
  auto meta = base;
  meta["pre_tokenizer"] = {{"type", "Metaspace"}};
  EXPECT_NE(msg(meta).find("pre_tokenizer type Metaspace is not supported"), std::string::npos);
  auto seq = base;
  seq["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_NE(msg(seq).find("normalizer Lowercase is not supported (supported: none, NFC, NFD, NFKC, "
                          "NFKD)"),
            std::string::npos)
      << msg(seq);
  auto far = base;
  far["model"]["vocab"]["b"] = 1 << 23;
  EXPECT_NE(msg(far).find("far above"), std::string::npos);
  fs::remove_all(dir);
}

// Unicode normalizers through ICU: the four forms on composed / decomposed / compatibility text.
TEST(UnicodeNormalize, FormsAgreeWithTheStandard) {
  using vq::tok::normalize_unicode;
  using vq::tok::UnicodeForm;
  const std::string e_acute = "\xC3\xA9", e_comb = "e\xCC\x81";  // U+00E9, e + U+0301
  const std::string fi_lig = "\xEF\xAC\x81";                     // U+FB01
  const std::string ga = "\xEA\xB0\x80", ga_jamo = "\xE1\x84\x80\xE1\x85\xA1";  // U+AC00
  EXPECT_EQ(normalize_unicode("x" + e_comb + "y", UnicodeForm::NFC), "x" + e_acute + "y");
  EXPECT_EQ(normalize_unicode(e_acute, UnicodeForm::NFD), e_comb);
  EXPECT_EQ(normalize_unicode(ga_jamo, UnicodeForm::NFC), ga);
  EXPECT_EQ(normalize_unicode(ga, UnicodeForm::NFD), ga_jamo);
  EXPECT_EQ(normalize_unicode(fi_lig, UnicodeForm::NFC), fi_lig);  // canonical forms keep it
  EXPECT_EQ(normalize_unicode(fi_lig, UnicodeForm::NFKC), "fi");
  EXPECT_EQ(normalize_unicode(fi_lig + e_acute, UnicodeForm::NFKD), "fi" + e_comb);
  EXPECT_EQ(normalize_unicode("plain ascii", UnicodeForm::NFKD), "plain ascii");
  EXPECT_EQ(normalize_unicode(e_comb, UnicodeForm::None), e_comb);
  try {
    normalize_unicode("ab\xC3(", UnicodeForm::NFC);
    ADD_FAILURE() << "accepted";
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("byte 0xc3 at offset 2"), std::string::npos) << e.what();
  }
}

// A tokenizer.json with the NFC normalizer (Qwen2's) encodes the decomposed and the composed
// spelling alike; NFD splits them; special tokens are matched before normalization.
TEST(HfTokenizerJson, NormalizerAppliesToTextBetweenSpecials) {
  const fs::path dir = fs::temp_directory_path() / ("vq_hf_nfc_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // Byte-level symbols: 0xC3 -> U+00C3, 0xA9 -> U+00A9.
  nlohmann::json j = {{"pre_tokenizer", {{"type", "ByteLevel"}}},
                      {"normalizer", {{"type", "NFC"}}},
                      {"added_tokens", {{{"id", 5}, {"content", "<s>"}, {"special", true}}}},
                      {"model",
                       {{"type", "BPE"},
                        {"vocab",
                         {{"a", 0},
                          {"\xC3\x83", 1},
                          {"\xC2\xA9", 2},
                          {"\xC3\x83\xC2\xA9", 3},
                          {"e", 4},
                          {"<s>", 5}}},
                        {"merges", {"\xC3\x83 \xC2\xA9"}}}}};
  auto load = [&](const nlohmann::json& js) {
    std::ofstream(dir / "tokenizer.json") << js.dump();
    return vq::load_tokenizer((dir / "tokenizer.json").string());
  };
  const auto t = load(j);
  EXPECT_NE(t->description().find("normalizer NFC"), std::string::npos) << t->description();
  EXPECT_EQ(t->encode("\xC3\xA9", false), (std::vector<int32_t>{3}));
  EXPECT_EQ(t->encode("e\xCC\x81", false), (std::vector<int32_t>{3}));
  EXPECT_EQ(t->encode("ae\xCC\x81<s>e\xCC\x81", false, true), (std::vector<int32_t>{0, 3, 5, 3}));
  EXPECT_THROW(t->encode("a\xFF", false), vq::InvalidArgument);
  j["normalizer"] = {{"type", "NFD"}};
  const auto d = load(j);
  const std::vector<int32_t> split = d->encode("\xC3\xA9", false);
  ASSERT_FALSE(split.empty());
  EXPECT_EQ(split[0], 4);  // "e", then the combining accent's bytes
  fs::remove_all(dir);
}

// The GGUF SPM tokenizers of stories260K.gguf (from tok512) and babyllama-char.gguf (from
// tok105.model) agree with the llama2.c tokenizer.bin files of the same vocabularies.
void check_gguf_vocab_against_bin(const std::string& gguf, const std::string& bin) {
  const std::string gpath = vq::locate_model_file(gguf);
  const std::string tpath = vq::locate_model_file(bin);
  const std::string text = vq::locate_model_file("tinystories-val.txt");
  if (gpath.empty() || tpath.empty() || text.empty())
    GTEST_SKIP() << gguf << " / " << bin << " / tinystories-val.txt not found";
  const auto gt = vq::load_tokenizer(gpath);
  const vq::Tokenizer lt = vq::Tokenizer::load(tpath);
  EXPECT_EQ(gt->vocab_size(), lt.vocab_size());
  std::istringstream in(slurp(text).substr(0, 20000));
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    EXPECT_EQ(gt->encode(line, true), lt.encode(line, true, false)) << line;
    ++lines;
  }
  EXPECT_GT(lines, 10);
}

TEST(GgufVocab, Stories260KVocabAgreesWithTok512Bin) {
  check_gguf_vocab_against_bin("stories260K.gguf", "tok512.bin");
}
TEST(GgufVocab, BabyllamaCharVocabAgreesWithTok105Bin) {
  check_gguf_vocab_against_bin("babyllama-char.gguf", "tok105.bin");
}

// libsentencepiece on tokp2048.model against the same vocabulary as a llama2.c tokenizer.bin.
TEST(SentencePiece, TokenizerModelAgreesWithItsBinAndRoundTrips) {
  const std::string mpath = vq::locate_model_file("tokp2048.model");
  const std::string bpath = vq::locate_model_file("tokp2048.bin");
  if (mpath.empty() || bpath.empty()) GTEST_SKIP() << "tokp2048.model / .bin not found";
  const auto sp = vq::load_tokenizer(mpath);
  const vq::Tokenizer lt = vq::Tokenizer::load(bpath);
  EXPECT_EQ(sp->vocab_size(), lt.vocab_size());
  EXPECT_EQ(sp->bos_id(), 1);
  for (const std::string s :
       {"Call me Ishmael.", "And God said, Let there be light: and there was light.",
        "The Union is strong; 1865 -- caf\xC3\xA9 \xE2\x82\xAC"}) {
    EXPECT_EQ(sp->encode(s, true), lt.encode(s, true, false)) << s;
    EXPECT_EQ(sp->decode(sp->encode(s, false)), s);
  }
  EXPECT_THROW(vq::load_tokenizer(bpath + ".missing.model"), vq::IoError);
}

TEST(TokenizeCli, PrintsIdsOnOneLine) {
  const std::string gpt2 = vq::locate_vocab_file("ggml-vocab-gpt-2.gguf");
  const std::string spm = vq::locate_vocab_file("ggml-vocab-llama-spm.gguf");
  if (gpt2.empty() || spm.empty()) GTEST_SKIP() << "vocab files not found";
  vqtest::CliRun r = vqtest::run_cli("tokenize --model " + gpt2 + " --text-string 'Hello world'");
  if (r.status == -1) GTEST_SKIP() << "no CLI in this build";
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "15496 995\n");
  r = vqtest::run_cli("tokenize --model " + spm + " --text-string 'Hello world'");
  EXPECT_EQ(r.out, "1 15043 3186\n");
  r = vqtest::run_cli("tokenize --no-bos --model " + spm + " --text-string 'Hello world' --json -");
  EXPECT_EQ(r.status, 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ids"], (std::vector<int32_t>{15043, 3186}));
  EXPECT_EQ(j["count"], 2);
  r = vqtest::run_cli("tokenize --model " + spm);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("needs --text FILE or --text-string S"), std::string::npos);
  r = vqtest::run_cli("tokenize --model /nonexistent.gguf --text-string x");
  EXPECT_EQ(r.status, 1);
  const std::string bin = vq::locate_model_file("stories260K.bin");
  if (!bin.empty()) {
    // A llama2.c checkpoint: its known tokenizer (tok512.bin) is used; same ids as the GGUF copy.
    const vqtest::CliRun a =
        vqtest::run_cli("tokenize --model " + bin + " --text-string 'Once upon a time'");
    const std::string g = vq::locate_model_file("stories260K.gguf");
    EXPECT_EQ(a.status, 0) << a.out;
    if (!g.empty()) {
      EXPECT_EQ(a.out,
                vqtest::run_cli("tokenize --model " + g + " --text-string 'Once upon a time'").out);
    }
  }
}

}  // namespace

namespace {

// The Llama-3 layout of a tokenizer.json (a Split regex, then ByteLevel without its own regex,
// ignore_merges) against a GGUF with tokenizer.ggml.pre = llama3 over the same (GPT-2)
// vocabulary: the two code paths must agree on every golden input string.
TEST(HfTokenizerJson, SplitThenByteLevelAgreesWithGgufLlama3Pre) {
  const std::string path = vq::locate_vocab_file("ggml-vocab-gpt-2.gguf");
  if (path.empty()) GTEST_SKIP() << "ggml-vocab-gpt-2.gguf not found";
  const vq::GgufFile src = vq::GgufFile::open(path);
  const auto tokens = src.get("tokenizer.ggml.tokens").as_string_array("t");
  const auto merges = src.get("tokenizer.ggml.merges").as_string_array("m");
  vqtest::GgufWriter w;
  w.kv_string("tokenizer.ggml.model", "gpt2");
  w.kv_string("tokenizer.ggml.pre", "llama3");
  w.kv_string_array("tokenizer.ggml.tokens", tokens);
  w.kv_string_array("tokenizer.ggml.merges", merges);
  const vqtest::Bytes gb = w.build();
  const auto gg = vq::tokenizer_from_gguf(
      vq::GgufFile::parse(vq::MappedFile::from_bytes(gb.data(), gb.size())));
  const std::string llama3 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  nlohmann::json j = {
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", llama3}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"},
           {"add_prefix_space", false},
           {"trim_offsets", true},
           {"use_regex", false}}}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", true}}}};
  const fs::path dir = fs::temp_directory_path() / ("vq_hf_l3_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "tokenizer.json");
    f << j.dump();
  }
  const auto hf = vq::load_tokenizer((dir / "tokenizer.json").string());
  const std::string inp = slurp(path + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t start = 0, n = 0;
  while (true) {
    const size_t hit = inp.find(sep, start);
    if (hit == std::string::npos) break;
    const std::string s = inp.substr(start, hit - start);
    EXPECT_EQ(hf->encode(s, false), gg->encode(s, false)) << s;
    start = hit + sep.size();
    ++n;
  }
  EXPECT_GT(n, 40u);
  // The llama3 split differs from GPT-2's on digits: "12345" is 123 + 45.
  EXPECT_NE(gg->encode(" 12345", false), vq::tokenizer_from_gguf(src)->encode(" 12345", false));
  fs::remove_all(dir);
}

}  // namespace

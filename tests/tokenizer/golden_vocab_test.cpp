// llama.cpp's own golden tokenizations (../shared/vocab/ggml-vocab-*.gguf with .inp / .out):
// every string must give exactly llama.cpp's ids (add_special = false, parse_special = false).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "veloxquant/gguf.hpp"
#include "veloxquant/tokenizers.hpp"

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// The .inp strings: separated by "\n__ggml_vocab_test__\n"; the file ends with a separator.
std::vector<std::string> split_inputs(const std::string& all) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t hit = all.find(sep, start);
    if (hit == std::string::npos) break;
    out.push_back(all.substr(start, hit - start));
    start = hit + sep.size();
  }
  if (start < all.size()) out.push_back(all.substr(start));
  return out;
}

std::vector<std::vector<int32_t>> read_outputs(const std::string& all) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream in(all);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    int64_t id;
    while (ls >> id) ids.push_back(static_cast<int32_t>(id));
    out.push_back(ids);
  }
  return out;
}

std::string show(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += " " + std::to_string(x);
  return s;
}

void check_vocab(const std::string& name, const std::string& expect_desc_prefix) {
  const std::string path = vq::locate_vocab_file(name);
  if (path.empty())
    GTEST_SKIP() << name << " not found (searched $VQ_VOCAB_DIR, $VQ_MODELS_DIR, ../shared/vocab)";
  std::ifstream probe(path + ".inp");
  if (!probe) GTEST_SKIP() << name << ".inp not found next to " << path;
  const auto inputs = split_inputs(slurp(path + ".inp"));
  const auto outputs = read_outputs(slurp(path + ".out"));
  ASSERT_EQ(inputs.size(), outputs.size())
      << "the .inp and .out files disagree on the string count";
  ASSERT_GE(inputs.size(), 40u);
  const auto tok = vq::tokenizer_from_gguf(vq::GgufFile::open(path));
  EXPECT_EQ(tok->description().rfind(expect_desc_prefix, 0), 0u) << tok->description();
  size_t pass = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t> got = tok->encode(inputs[i], false, false);
    if (got == outputs[i]) {
      ++pass;
    } else {
      ADD_FAILURE() << name << " string #" << i << " '" << inputs[i]
                    << "'\n  want:" << show(outputs[i]) << "\n  got: " << show(got);
    }
  }
  std::printf("[golden] %s: %zu / %zu strings match llama.cpp\n", name.c_str(), pass,
              inputs.size());
  EXPECT_EQ(pass, inputs.size());
}

TEST(GoldenVocab, LlamaSpmMatchesLlamaCpp) {
  check_vocab("ggml-vocab-llama-spm.gguf", "gguf llama");
}
TEST(GoldenVocab, Gpt2MatchesLlamaCpp) {
  check_vocab("ggml-vocab-gpt-2.gguf", "gguf gpt2");
}

// Round trip through decode on the same strings: byte-exact for both (SPM's decode drops the
// dummy-prefix space its encode added, as libsentencepiece and llama.cpp do).
TEST(GoldenVocab, DecodeInvertsEncode) {
  for (const char* name : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"}) {
    const std::string path = vq::locate_vocab_file(name);
    if (path.empty()) GTEST_SKIP() << name << " not found";
    const auto tok = vq::tokenizer_from_gguf(vq::GgufFile::open(path));
    for (const std::string& s : split_inputs(slurp(path + ".inp"))) {
      const std::string back = tok->decode(tok->encode(s, false, false));
      EXPECT_EQ(back, s) << name;
    }
  }
}

}  // namespace

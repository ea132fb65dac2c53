// PCRE2-backed pre-tokenizer splitting and the regex lists of llama.cpp's pre-tokenizer names.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex_split.hpp"

#include <pcre2.h>

#include <utility>

#include "veloxquant/errors.hpp"
#include "veloxquant/tokenizers.hpp"

namespace vq::tok {
namespace {

// The patterns, by family. They describe the splits llama.cpp applies for each
// tokenizer.ggml.pre value (which in turn mirror each model's Hugging Face pre-tokenizer).
const std::string kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const std::string kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const std::string kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// CJK ideographs, the block before them and Hangul, as deepseek's tokenizers isolate them.
const std::string kCjk = "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";

struct PreRow {
  const char* name;
  std::vector<std::string> regexes;
};

const std::vector<PreRow>& pre_table() {
  static const std::vector<PreRow> rows = {
      {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}},
      {"gpt-2", {kGpt2}},
      {"gpt-neox", {kGpt2}},
      {"mpt", {kGpt2}},
      {"olmo", {kGpt2}},
      {"llama3", {kLlama3}},
      {"llama-bpe", {kLlama3}},
      {"llama-v3", {kLlama3}},
      {"qwen2", {kQwen2}},
      {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}},
      {"starcoder", {"\\p{N}", kGpt2}},
      {"refact", {"\\p{N}", kGpt2}},
      {"smollm", {"\\p{N}", kGpt2}},
      {"deepseek-coder", {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjk, "\\p{N}"}},
      // deepseek-llm's letter class spelled with Unicode letter properties: Latin, Greek, Cyrillic,
      // Armenian, Georgian, Cherokee and the other cased scripts it lists are the cased letters
      // (Lu, Ll, Lt) plus the few Lo/Lm it names; PCRE2's \p{L&} is that cased-letter class.
      {"deepseek-llm",
       {"[\\r\\n]", "\\s?\\p{L&}+",
        "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
        "\\s+\\z", kCjk, "\\p{N}+"}},
  };
  return rows;
}

std::string names_list() {
  std::string s;
  for (const PreRow& r : pre_table()) s += (s.empty() ? "" : ", ") + std::string(r.name);
  return s;
}

}  // namespace

const std::string& gpt2_regex() {
  return kGpt2;
}

std::vector<std::string> gguf_pretokenizer_regexes(const std::string& pre) {
  for (const PreRow& r : pre_table())
    if (pre == r.name) return r.regexes;
  VQ_THROW(FormatError, "tokenizer.ggml.pre '", pre,
           "' is not supported (supported: ", names_list(), ")");
}

struct RegexSplitter::Impl {
  std::vector<pcre2_code*> codes;
  ~Impl() {
    for (pcre2_code* c : codes) pcre2_code_free(c);
  }
};

RegexSplitter::RegexSplitter(const std::vector<std::string>& patterns)
    : impl_(std::make_unique<Impl>()) {
  for (const std::string& p : patterns) {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* c =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
    if (c == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      VQ_THROW(InvalidArgument, "pre-tokenizer regex /", p, "/ does not compile at offset ", off,
               ": ", reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);  // optional speed-up; interpretation works without
    impl_->codes.push_back(c);
  }
}

RegexSplitter::RegexSplitter() = default;
RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;
bool RegexSplitter::empty() const {
  return !impl_ || impl_->codes.empty();
}

std::vector<std::string> RegexSplitter::split(std::string_view text) const {
  std::vector<std::string> pieces;
  if (text.empty()) return pieces;
  pieces.emplace_back(text);
  if (empty()) return pieces;
  for (pcre2_code* code : impl_->codes) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    VQ_CHECK(md != nullptr, Error, "out of memory creating PCRE2 match data");
    std::vector<std::string> next;
    for (const std::string& piece : pieces) {
      const auto* subj = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0, gap_start = 0;
      while (pos <= piece.size()) {
        const int rc = pcre2_match(code, subj, piece.size(), pos, 0, md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          pcre2_match_data_free(md);
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof msg);
          VQ_THROW(Error, "PCRE2 match failed: ", reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t b = ov[0], e = ov[1];
        if (e == b) {
          // An empty match: step one character and keep looking (the gap keeps these bytes).
          pos = b + 1;
          while (pos < piece.size() && (static_cast<unsigned char>(piece[pos]) & 0xC0) == 0x80)
            ++pos;
          if (b >= piece.size()) break;
          continue;
        }
        if (b > gap_start) next.push_back(piece.substr(gap_start, b - gap_start));
        next.push_back(piece.substr(b, e - b));
        gap_start = pos = e;
      }
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    pcre2_match_data_free(md);
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace vq::tok

namespace vq {
std::vector<std::string> supported_gguf_pretokenizers() {
  std::vector<std::string> out;
  for (const auto& r : tok::pre_table()) out.push_back(r.name);
  return out;
}
std::vector<std::string> pretokenize(const std::string& pre, std::string_view text) {
  return tok::RegexSplitter(tok::gguf_pretokenizer_regexes(pre)).split(text);
}
}  // namespace vq

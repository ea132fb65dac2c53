// load_tokenizer(): pick the reader from the path; SentencePiece and llama2.c wrappers; where
// the vocabulary test files are.
#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tokenizer/hf_tokenizer.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/gguf.hpp"
#include "veloxquant/model.hpp"

namespace vq {
namespace tok {
namespace {

class SentencePieceTokenizer : public TextTokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path) {
    const auto st = sp_.Load(path);
    VQ_CHECK(st.ok(), FormatError, path, ": not a readable SentencePiece model (", st.ToString(),
             ")");
  }
  std::vector<int32_t> encode(std::string_view text, bool add_bos,
                              bool /*parse_special*/) const override {
    std::vector<int> ids;
    if (!text.empty()) {
      const auto st = sp_.Encode(absl::string_view(text.data(), text.size()), &ids);
      VQ_CHECK(st.ok(), InvalidArgument,
               "SentencePiece could not encode the text: ", st.ToString());
    }
    std::vector<int32_t> out;
    if (add_bos && sp_.bos_id() >= 0) out.push_back(sp_.bos_id());
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::vector<int> v(ids.begin(), ids.end());
    for (int id : v)
      VQ_CHECK(id >= 0 && id < sp_.GetPieceSize(), InvalidArgument, "token id ", id,
               " outside [0, ", sp_.GetPieceSize(), ")");
    std::string s;
    const auto st = sp_.Decode(v, &s);
    VQ_CHECK(st.ok(), InvalidArgument, "SentencePiece could not decode: ", st.ToString());
    return s;
  }
  int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  int32_t bos_id() const override { return sp_.bos_id(); }
  int32_t eos_id() const override { return sp_.eos_id(); }
  bool add_bos_default() const override { return sp_.bos_id() >= 0; }
  std::string description() const override {
    return detail::cat("SentencePiece model (", sp_.GetPieceSize(), " pieces)");
  }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
};

class Llama2cTokenizer : public TextTokenizer {
 public:
  explicit Llama2cTokenizer(const std::string& path) : t_(Tokenizer::load(path)) {}
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool) const override {
    return t_.encode(text, add_bos, false);
  }
  std::string decode(const std::vector<int32_t>& ids) const override { return t_.decode(ids); }
  int64_t vocab_size() const override { return t_.vocab_size(); }
  int32_t bos_id() const override { return Tokenizer::kBos; }
  int32_t eos_id() const override { return Tokenizer::kEos; }
  bool add_bos_default() const override { return true; }
  std::string description() const override {
    return detail::cat("llama2.c tokenizer.bin (", t_.vocab_size(), " pieces)");
  }

 private:
  Tokenizer t_;
};

bool ends_with(const std::string& s, const char* suf) {
  const size_t n = std::strlen(suf);
  return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}

bool starts_with_bytes(const std::string& path, const char* magic, size_t n) {
  std::ifstream f(path, std::ios::binary);
  char buf[8] = {};
  f.read(buf, static_cast<std::streamsize>(n));
  return f.gcount() == static_cast<std::streamsize>(n) && std::memcmp(buf, magic, n) == 0;
}

}  // namespace

std::unique_ptr<TextTokenizer> load_sentencepiece_model(const std::string& path) {
  return std::make_unique<SentencePieceTokenizer>(path);
}
std::unique_ptr<TextTokenizer> load_llama2c_tokenizer(const std::string& path) {
  return std::make_unique<Llama2cTokenizer>(path);
}

}  // namespace tok

std::unique_ptr<TextTokenizer> load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  VQ_CHECK(fs::exists(path, ec), IoError, "tokenizer path ", path, " does not exist");
  if (fs::is_directory(path, ec)) {
    const fs::path d(path);
    if (fs::exists(d / "tokenizer.json", ec))
      return tok::load_hf_tokenizer_json((d / "tokenizer.json").string());
    if (fs::exists(d / "tokenizer.model", ec))
      return tok::load_sentencepiece_model((d / "tokenizer.model").string());
    VQ_THROW(IoError, path, ": no tokenizer.json or tokenizer.model in this directory");
  }
  if (tok::ends_with(path, ".gguf") || tok::starts_with_bytes(path, "GGUF", 4))
    return tokenizer_from_gguf(GgufFile::open(path));
  if (tok::ends_with(path, ".json")) return tok::load_hf_tokenizer_json(path);
  if (tok::ends_with(path, ".model")) return tok::load_sentencepiece_model(path);
  if (tok::ends_with(path, ".bin")) return tok::load_llama2c_tokenizer(path);
  VQ_THROW(InvalidArgument, "cannot tell the tokenizer format of ", path,
           " (expected a .gguf, tokenizer.json, tokenizer.model, llama2.c tokenizer .bin, or a "
           "Hugging Face directory)");
}

std::vector<std::string> vocab_search_dirs() {
  std::vector<std::string> dirs;
  if (const char* v = std::getenv("VQ_VOCAB_DIR"); v && *v) dirs.emplace_back(v);
  if (const char* m = std::getenv("VQ_MODELS_DIR"); m && *m) {
    dirs.push_back((std::filesystem::path(m) / ".." / "vocab").string());
    dirs.emplace_back(m);
  }
  // The model search roots end in .../shared/models; the vocabularies sit next to them.
  for (const std::string& d : model_search_dirs()) {
    const std::filesystem::path p(d);
    if (p.filename() == "models") dirs.push_back((p.parent_path() / "vocab").string());
  }
  return dirs;
}

std::string locate_vocab_file(const std::string& name) {
  std::error_code ec;
  for (const std::string& d : vocab_search_dirs()) {
    const std::filesystem::path p = std::filesystem::path(d) / name;
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
  }
  return {};
}

}  // namespace vq

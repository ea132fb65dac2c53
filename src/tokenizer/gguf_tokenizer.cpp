// The tokenizer a GGUF file carries in its tokenizer.ggml.* metadata.
#include <cmath>
#include <memory>

#include "tokenizer/bpe.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/gguf.hpp"

namespace vq {
namespace {

int32_t optional_id(const GgufFile& g, const char* key, int64_t n, int32_t fallback) {
  const GgufValue* v = g.find(key);
  if (!v) return fallback;
  const int64_t id = v->as_int(key);
  // llama.cpp writes -1 (as a uint32 0xFFFFFFFF in some files) for "none".
  if (id == -1 || id == 0xFFFFFFFFll) return -1;
  VQ_CHECK(id >= 0 && id < n, FormatError, g.path(), ": ", key, " = ", id,
           " is outside the vocabulary [0, ", n, ")");
  return static_cast<int32_t>(id);
}

bool optional_bool(const GgufFile& g, const char* key, bool fallback) {
  const GgufValue* v = g.find(key);
  return v ? v->as_bool(key) : fallback;
}

void load_vocab(const GgufFile& g, tok::Vocab& v, const std::string& model) {
  v.text = g.get("tokenizer.ggml.tokens").as_string_array("tokenizer.ggml.tokens");
  const int64_t n = v.size();
  VQ_CHECK(n > 0, FormatError, g.path(), ": tokenizer.ggml.tokens is empty");
  VQ_CHECK(n < (int64_t{1} << 31), FormatError, g.path(), ": ", n,
           " tokens exceed the 2^31 id space");
  v.type.assign(static_cast<size_t>(n), tok::kNormal);
  if (const GgufValue* t = g.find("tokenizer.ggml.token_type")) {
    std::vector<int64_t> ty = t->as_int_array("tokenizer.ggml.token_type");
    VQ_CHECK(static_cast<int64_t>(ty.size()) == n, FormatError, g.path(),
             ": tokenizer.ggml.token_type has ", ty.size(), " entries for ", n, " tokens");
    for (int64_t i = 0; i < n; ++i) {
      VQ_CHECK(ty[i] >= 0 && ty[i] <= 6, FormatError, g.path(), ": token ", i, " has type ", ty[i],
               " (valid: 0..6)");
      v.type[i] = static_cast<int32_t>(ty[i]);
    }
  }
  v.build_index();
  (void)model;
}

void collect_specials(const tok::Vocab& v, std::vector<int32_t>& always,
                      std::vector<int32_t>& parse) {
  for (int64_t i = 0; i < v.size(); ++i) {
    if (v.type[i] == tok::kUserDefined)
      always.push_back(static_cast<int32_t>(i));
    else if (v.type[i] == tok::kControl || v.type[i] == tok::kUnknown)
      parse.push_back(static_cast<int32_t>(i));
  }
}

}  // namespace

std::unique_ptr<TextTokenizer> tokenizer_from_gguf(const GgufFile& g) {
  const GgufValue* mv = g.find("tokenizer.ggml.model");
  VQ_CHECK(mv != nullptr, FormatError, g.path(),
           ": this GGUF has no tokenizer (tokenizer.ggml.model is missing); pass --tokenizer");
  const std::string model = mv->as_string("tokenizer.ggml.model");
  VQ_CHECK(model != "none" && model != "no_vocab", FormatError, g.path(),
           ": this GGUF has no vocabulary (tokenizer.ggml.model = ", model, "); pass --tokenizer");
  VQ_CHECK(g.has("tokenizer.ggml.tokens"), FormatError, g.path(),
           ": tokenizer.ggml.tokens is missing; pass --tokenizer");
  if (model == "llama") {
    auto t = std::make_unique<tok::SpmTokenizer>();
    load_vocab(g, t->vocab, model);
    const int64_t n = t->vocab.size();
    const GgufValue& sv = g.get("tokenizer.ggml.scores");
    t->scores = sv.as_float_array("tokenizer.ggml.scores");
    VQ_CHECK(static_cast<int64_t>(t->scores.size()) == n, FormatError, g.path(),
             ": tokenizer.ggml.scores has ", t->scores.size(), " entries for ", n, " tokens");
    for (int64_t i = 0; i < n; ++i)
      VQ_CHECK(!std::isnan(t->scores[i]), FormatError, g.path(), ": tokenizer.ggml.scores[", i,
               "] (token '", t->vocab.text[i], "') is NaN");
    t->bos = optional_id(g, "tokenizer.ggml.bos_token_id", n, n > 1 ? 1 : -1);
    t->eos = optional_id(g, "tokenizer.ggml.eos_token_id", n, n > 2 ? 2 : -1);
    t->unk = optional_id(g, "tokenizer.ggml.unknown_token_id", n, 0);
    t->add_bos = optional_bool(g, "tokenizer.ggml.add_bos_token", true);
    t->add_space_prefix = optional_bool(g, "tokenizer.ggml.add_space_prefix", true);
    collect_specials(t->vocab, t->always_specials, t->parse_specials);
    t->desc = detail::cat("gguf llama (SentencePiece BPE, ", n, " pieces)");
    return t;
  }
  if (model == "gpt2") {
    auto t = std::make_unique<tok::BpeTokenizer>();
    load_vocab(g, t->vocab, model);
    const int64_t n = t->vocab.size();
    t->set_merges(g.get("tokenizer.ggml.merges").as_string_array("tokenizer.ggml.merges"),
                  g.path() + ": tokenizer.ggml.merges");
    const std::string pre = g.get_string("tokenizer.ggml.pre", "default");
    t->splitter = tok::RegexSplitter(tok::gguf_pretokenizer_regexes(pre));
    t->ignore_merges = pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3";
    t->bos = optional_id(g, "tokenizer.ggml.bos_token_id", n, -1);
    t->eos = optional_id(g, "tokenizer.ggml.eos_token_id", n, -1);
    t->add_bos = optional_bool(g, "tokenizer.ggml.add_bos_token", false);
    t->add_prefix_space = optional_bool(g, "tokenizer.ggml.add_space_prefix", false);
    collect_specials(t->vocab, t->always_specials, t->parse_specials);
    t->desc = detail::cat("gguf gpt2 (byte-level BPE, pre ", pre, ", ", n, " tokens, ",
                          t->ranks.size(), " merges)");
    return t;
  }
  VQ_THROW(FormatError, g.path(), ": tokenizer.ggml.model '", model,
           "' is not supported (supported: llama, gpt2)");
}

}  // namespace vq

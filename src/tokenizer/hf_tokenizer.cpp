// Hugging Face tokenizer.json: model BPE with a ByteLevel pre-tokenizer (alone or after Split
// regexes in a Sequence), merges and added tokens. BOS/EOS from the tokenizer_config.json next to
// it when present, else from a TemplateProcessing post-processor.
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "tokenizer/bpe.hpp"
#include "tokenizer/hf_tokenizer.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/mapped_file.hpp"

namespace vq::tok {
namespace {

using nlohmann::json;
constexpr uint64_t kMaxJsonBytes = 512ull << 20;

json read_json(const std::string& path) {
  auto f = MappedFile::open(path);
  VQ_CHECK(f->size() <= kMaxJsonBytes, FormatError, path, ": ", f->size(), " bytes, above the ",
           kMaxJsonBytes, "-byte limit for a JSON file");
  const char* b = reinterpret_cast<const char*>(f->data());
  json j = json::parse(b, b + f->size(), nullptr, false);
  VQ_CHECK(!j.is_discarded() && j.is_object(), FormatError, path, ": not a JSON object");
  return j;
}

// Append the regexes of one pre-tokenizer (recursively for Sequence); sets `byte_level`.
void add_pretokenizer(const json& p, const std::string& src, std::vector<std::string>& regexes,
                      bool& byte_level, bool& prefix_space) {
  VQ_CHECK(p.is_object() && p.contains("type") && p["type"].is_string(), FormatError, src,
           ": pre_tokenizer entry without a type");
  const std::string type = p["type"].get<std::string>();
  if (type == "Sequence") {
    VQ_CHECK(p.contains("pretokenizers") && p["pretokenizers"].is_array(), FormatError, src,
             ": Sequence pre_tokenizer without a pretokenizers list");
    for (const json& e : p["pretokenizers"])
      add_pretokenizer(e, src, regexes, byte_level, prefix_space);
  } else if (type == "ByteLevel") {
    byte_level = true;
    prefix_space = p.value("add_prefix_space", false);
    if (p.value("use_regex", true)) regexes.push_back(gpt2_regex());
  } else if (type == "Split") {
    const std::string behavior = p.value("behavior", std::string("Isolated"));
    VQ_CHECK(behavior == "Isolated", FormatError, src, ": Split behavior ", behavior,
             " is not supported (supported: Isolated)");
    VQ_CHECK(!p.value("invert", false), FormatError, src, ": inverted Split is not supported");
    VQ_CHECK(p.contains("pattern") && p["pattern"].is_object(), FormatError, src,
             ": Split without a pattern");
    const json& pat = p["pattern"];
    if (pat.contains("Regex") && pat["Regex"].is_string()) {
      regexes.push_back(pat["Regex"].get<std::string>());
    } else if (pat.contains("String") && pat["String"].is_string()) {
      // A literal: quote it for PCRE2.
      regexes.push_back("\\Q" + pat["String"].get<std::string>() + "\\E");
    } else {
      VQ_THROW(FormatError, src, ": Split pattern is neither Regex nor String");
    }
  } else if (type == "Digits") {
    regexes.push_back(p.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+");
  } else {
    VQ_THROW(
        FormatError, src, ": pre_tokenizer type ", type,
        " is not supported (supported: ByteLevel, Split (Isolated), Digits, Sequence of these)");
  }
}

std::string token_content(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return {};
}

}  // namespace

std::unique_ptr<TextTokenizer> load_hf_tokenizer_json(const std::string& path) {
  const json j = read_json(path);
  VQ_CHECK(j.contains("model") && j["model"].is_object(), FormatError, path, ": no model object");
  const json& m = j["model"];
  const std::string mtype = m.value("type", std::string("BPE"));
  VQ_CHECK(mtype == "BPE", FormatError, path, ": tokenizer model type ", mtype,
           " is not supported (supported: BPE with a ByteLevel pre-tokenizer; for SentencePiece "
           "models use tokenizer.model)");
  UnicodeForm form = UnicodeForm::None;
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const std::string nt =
        j["normalizer"].is_object() ? j["normalizer"].value("type", std::string("?")) : "?";
    form = unicode_form(nt);
    VQ_CHECK(form != UnicodeForm::None, FormatError, path, ": normalizer ", nt,
             " is not supported (supported: none, NFC, NFD, NFKC, NFKD)");
  }
  std::vector<std::string> regexes;
  bool byte_level = false, prefix_space = false;
  VQ_CHECK(j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null(), FormatError, path,
           ": no pre_tokenizer (only byte-level BPE tokenizers are supported)");
  add_pretokenizer(j["pre_tokenizer"], path, regexes, byte_level, prefix_space);
  VQ_CHECK(
      byte_level, FormatError, path,
      ": the pre_tokenizer has no ByteLevel step (only byte-level BPE tokenizers are supported)");

  auto t = std::make_unique<BpeTokenizer>();
  VQ_CHECK(m.contains("vocab") && m["vocab"].is_object(), FormatError, path,
           ": model.vocab is not an object");
  const size_t nv = m["vocab"].size();
  VQ_CHECK(nv > 0 && nv < (size_t{1} << 24), FormatError, path, ": model.vocab has ", nv,
           " entries (limit 2^24)");
  int64_t max_id = -1;
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    VQ_CHECK(it.value().is_number_integer(), FormatError, path, ": vocab id of ", it.key(),
             " is not an integer");
    const int64_t id = it.value().get<int64_t>();
    VQ_CHECK(id >= 0 && id < (int64_t{1} << 24), FormatError, path, ": vocab id ", id, " of ",
             it.key(), " outside [0, 2^24)");
    max_id = std::max(max_id, id);
  }
  std::vector<std::pair<int64_t, const json*>> added;
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& a : j["added_tokens"]) {
      VQ_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() &&
                   a.contains("content") && a["content"].is_string(),
               FormatError, path,
               ": an added_tokens entry lacks an integer id or a content string");
      const int64_t id = a["id"].get<int64_t>();
      VQ_CHECK(id >= 0 && id < (int64_t{1} << 24), FormatError, path, ": added token id ", id,
               " outside [0, 2^24)");
      max_id = std::max(max_id, id);
      added.emplace_back(id, &a);
    }
  }
  // Ids must be dense enough that a table of max_id + 1 entries is bounded by the file's own size.
  VQ_CHECK(static_cast<size_t>(max_id) < 4 * (nv + added.size()) + 1024, FormatError, path,
           ": the largest token id ", max_id, " is far above the ", nv + added.size(),
           " tokens listed");
  t->vocab.text.assign(static_cast<size_t>(max_id + 1), std::string());
  t->vocab.type.assign(static_cast<size_t>(max_id + 1), kUnused);
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    t->vocab.text[id] = it.key();
    t->vocab.type[id] = kNormal;
  }
  for (const auto& [id, a] : added) {
    t->vocab.text[id] = (*a)["content"].get<std::string>();
    const bool special = a->value("special", false);
    t->vocab.type[id] = special ? kControl : kUserDefined;
    (special ? t->parse_specials : t->always_specials).push_back(static_cast<int32_t>(id));
  }
  t->vocab.build_index();
  std::vector<std::string> merges;
  if (m.contains("merges")) {
    VQ_CHECK(m["merges"].is_array(), FormatError, path, ": model.merges is not an array");
    merges.reserve(m["merges"].size());
    for (const json& e : m["merges"]) {
      if (e.is_string()) {
        merges.push_back(e.get<std::string>());
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        merges.push_back(e[0].get<std::string>() + " " + e[1].get<std::string>());
      } else {
        VQ_THROW(FormatError, path, ": a merges entry is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }
  t->set_merges(merges, path + ": model.merges");
  t->ignore_merges = m.value("ignore_merges", false);
  t->splitter = RegexSplitter(regexes);
  t->add_prefix_space = prefix_space;
  t->normalizer = form;

  // BOS / EOS.
  const std::filesystem::path cfg =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  std::string bos_text, eos_text;
  bool add_bos_known = false;
  if (std::filesystem::exists(cfg, ec)) {
    const json c = read_json(cfg.string());
    if (c.contains("bos_token")) bos_text = token_content(c["bos_token"]);
    if (c.contains("eos_token")) eos_text = token_content(c["eos_token"]);
    if (c.contains("add_bos_token") && c["add_bos_token"].is_boolean()) {
      t->add_bos = c["add_bos_token"].get<bool>();
      add_bos_known = true;
    }
  }
  if (j.contains("post_processor") && j["post_processor"].is_object()) {
    const json& pp = j["post_processor"];
    const json* tp = nullptr;
    if (pp.value("type", std::string()) == "TemplateProcessing") tp = &pp;
    if (pp.value("type", std::string()) == "Sequence" && pp.contains("processors") &&
        pp["processors"].is_array())
      for (const json& e : pp["processors"])
        if (e.is_object() && e.value("type", std::string()) == "TemplateProcessing") tp = &e;
    if (tp && tp->contains("single") && (*tp)["single"].is_array() && !(*tp)["single"].empty()) {
      const json& first = (*tp)["single"][0];
      if (first.is_object() && first.contains("SpecialToken") &&
          first["SpecialToken"].is_object()) {
        const std::string id = first["SpecialToken"].value("id", std::string());
        if (bos_text.empty()) bos_text = id;
        if (!add_bos_known) t->add_bos = !id.empty();
      }
    }
  }
  if (!bos_text.empty()) t->bos = t->vocab.find(bos_text);
  if (!eos_text.empty()) t->eos = t->vocab.find(eos_text);
  if (t->bos < 0) t->add_bos = false;
  t->desc = detail::cat("tokenizer.json (byte-level BPE, ", t->vocab.size(), " tokens, ",
                        t->ranks.size(), " merges, ", regexes.size(), " split regexes",
                        form != UnicodeForm::None ? ", normalizer " : "",
                        form != UnicodeForm::None ? unicode_form_name(form) : "", ")");
  return t;
}

}  // namespace vq::tok

// Encoding and decoding of the two BPE flavours.
#include "tokenizer/bpe.hpp"

#include <cstdio>

#include "tokenizer/utf8.hpp"
#include "veloxquant/errors.hpp"

namespace vq::tok {

// ------------------------------------------------------------------------------------------------
// Byte-level BPE

void BpeTokenizer::set_merges(const std::vector<std::string>& merges, const std::string& where) {
  ranks.clear();
  ranks.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string& m = merges[r];
    // The separator is the first space not at position 0 (a piece never starts the split).
    const size_t sp = m.find(' ', 1);
    VQ_CHECK(sp != std::string::npos && sp + 1 < m.size(), FormatError, where, ": merge #", r, " '",
             m, "' is not two pieces separated by a space");
    std::string key = m.substr(0, sp);
    key += '\0';
    key += m.substr(sp + 1);
    ranks.emplace(std::move(key), static_cast<int32_t>(r));  // first occurrence keeps its rank
  }
}

void BpeTokenizer::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    const int32_t whole = vocab.find(word);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  std::vector<std::string> symbols;
  for (std::string_view c : utf8_chars(word)) symbols.emplace_back(c);
  std::string key;
  auto pri = [&](const std::string&, const std::string& l,
                 const std::string& r) -> std::optional<double> {
    key.assign(l);
    key += '\0';
    key += r;
    auto it = ranks.find(key);
    if (it == ranks.end()) return std::nullopt;
    return -static_cast<double>(it->second);
  };
  for (const std::string& s : merge_symbols(std::move(symbols), pri)) {
    const int32_t id = vocab.find(s);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // Not a token: emit each byte's character that is one (what llama.cpp does).
    for (char ch : s) {
      const int32_t b = vocab.find(std::string_view(&ch, 1));
      if (b >= 0) out.push_back(b);
    }
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_bos_token,
                                          bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos_token && bos >= 0) out.push_back(bos);
  std::vector<int32_t> specials = always_specials;
  if (parse_special) specials.insert(specials.end(), parse_specials.begin(), parse_specials.end());
  bool first = true;
  for (const Fragment& f : partition_specials(text, vocab, specials)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      first = false;
      continue;
    }
    // Special tokens are matched on the raw text; the text between them is normalized (as the
    // tokenizers library does: added tokens are extracted before the normalizer runs).
    std::string t = normalize_unicode(f.text, normalizer);
    if (add_prefix_space && first && !t.empty() && t[0] != ' ') t.insert(t.begin(), ' ');
    first = false;
    for (const std::string& w : splitter.split(t)) encode_word(bytes_to_unicode(w), out);
  }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    VQ_CHECK(id >= 0 && id < vocab.size(), InvalidArgument, "token id ", id, " outside [0, ",
             vocab.size(), ")");
    const int32_t ty = vocab.type[id];
    if (ty == kControl) continue;
    if (ty == kUserDefined)
      out += vocab.text[id];
    else
      out += unicode_to_bytes(vocab.text[id]);
  }
  return out;
}

// ------------------------------------------------------------------------------------------------
// SentencePiece-style BPE

namespace {
const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space
}

void SpmTokenizer::encode_text(const std::string& text, std::vector<int32_t>& out) const {
  std::vector<std::string> symbols;
  for (std::string_view c : utf8_chars(text)) symbols.emplace_back(c);
  auto pri = [&](const std::string& merged, const std::string&,
                 const std::string&) -> std::optional<double> {
    const int32_t id = vocab.find(merged);
    if (id < 0) return std::nullopt;
    return static_cast<double>(scores[id]);
  };
  for (const std::string& s : merge_symbols(std::move(symbols), pri)) {
    const int32_t id = vocab.find(s);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // Byte fallback: <0xNN> pieces, else the byte itself as a piece, else unknown.
    for (unsigned char b : s) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      int32_t bid = vocab.find(buf);
      if (bid < 0) bid = vocab.find(std::string(1, static_cast<char>(b)));
      if (bid < 0) bid = unk;
      if (bid >= 0) out.push_back(bid);
    }
  }
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_bos_token,
                                          bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos_token && bos >= 0) out.push_back(bos);
  std::vector<int32_t> specials = always_specials;
  if (parse_special) specials.insert(specials.end(), parse_specials.begin(), parse_specials.end());
  bool prev_special = true;  // the text start counts as following a special token
  for (const Fragment& f : partition_specials(text, vocab, specials)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    std::string t;
    if (add_space_prefix && prev_special) t = " ";
    t += f.text;
    prev_special = false;
    std::string esc;
    esc.reserve(t.size() + 8);
    for (char c : t) {
      if (c == ' ')
        esc += kSpace;
      else
        esc += c;
    }
    encode_text(esc, out);
  }
  return out;
}

std::string SpmTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  // The dummy prefix encode() puts before the text comes back as a space at the start of the
  // first piece; like libsentencepiece, decode drops that one space (only at the very start of
  // the text: control tokens before it give no text, a byte piece or a space after them stays).
  bool at_start = add_space_prefix;
  for (int32_t id : ids) {
    VQ_CHECK(id >= 0 && id < vocab.size(), InvalidArgument, "token id ", id, " outside [0, ",
             vocab.size(), ")");
    const int32_t ty = vocab.type[id];
    const std::string& p = vocab.text[id];
    if (ty == kControl || ty == kUnknown) continue;
    unsigned v = 0;
    if (ty == kByte && p.size() == 6 && std::sscanf(p.c_str(), "<0x%02X>", &v) == 1) {
      at_start = false;
      out += static_cast<char>(v);
      continue;
    }
    size_t i = 0;
    if (at_start && p.compare(0, kSpace.size(), kSpace) == 0) i = kSpace.size();
    at_start = false;
    while (i < p.size()) {
      if (p.compare(i, kSpace.size(), kSpace) == 0) {
        out += ' ';
        i += kSpace.size();
      } else {
        out += p[i++];
      }
    }
  }
  return out;
}

}  // namespace vq::tok

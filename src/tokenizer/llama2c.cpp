// llama2.c tokenizer.bin and its encode/decode. The merge loop is llama2.c's ("merge the adjacent
// pair whose concatenation is a piece with the highest score, leftmost on ties, until none is
// left"), run with a heap over live pairs instead of a full rescan per merge, so a whole
// validation text encodes in O(n log n).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <queue>
#include <string>
#include <vector>

#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"

namespace vq {

namespace {

// "<0xNN>" -> NN, or -1.
int byte_piece_value(const std::string& p) {
  if (p.size() != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(p[3]), lo = hex(p[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path, int64_t vocab_size) {
  std::ifstream f(path, std::ios::binary);
  VQ_CHECK(f.good(), IoError, "cannot open tokenizer '", path, "'");
  f.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(f.tellg());
  f.seekg(0, std::ios::beg);
  VQ_CHECK(size >= 4, FormatError, "tokenizer '", path, "' has ", size,
           " bytes, fewer than the 4-byte max_token_length field");
  int32_t max_len = 0;
  f.read(reinterpret_cast<char*>(&max_len), 4);
  VQ_CHECK(max_len >= 1 && max_len <= 65536, FormatError, "tokenizer '", path,
           "': max_token_length = ", max_len, " is out of range [1, 65536]");
  VQ_CHECK(vocab_size <= (1 << 21), InvalidArgument, "Tokenizer::load: vocab_size = ", vocab_size,
           " exceeds 2097152");
  std::vector<std::string> pieces;
  std::vector<float> scores;
  int64_t pos = 4;
  while (vocab_size > 0 ? static_cast<int64_t>(pieces.size()) < vocab_size : pos < size) {
    const int64_t id = static_cast<int64_t>(pieces.size());
    // A file that ends cleanly after its last piece, short of the model's vocabulary, is a whole
    // tokenizer of another model: say so instead of "truncated".
    VQ_CHECK(!(vocab_size > 0 && pos == size && id >= 3), FormatError, "tokenizer '", path,
             "' holds ", id, " pieces but the model's vocabulary has ", vocab_size,
             ": it belongs to another model (pass the tokenizer of this model, e.g. tok",
             vocab_size, ".bin)");
    VQ_CHECK(size - pos >= 8, FormatError, "tokenizer '", path, "' is truncated inside piece ", id,
             vocab_size > 0 ? detail::cat(" of ", vocab_size) : std::string(),
             " (its score/length fields need 8 bytes, ", size - pos, " left)");
    float score = 0;
    int32_t len = 0;
    f.read(reinterpret_cast<char*>(&score), 4);
    f.read(reinterpret_cast<char*>(&len), 4);
    pos += 8;
    VQ_CHECK(std::isfinite(score), FormatError, "tokenizer '", path, "': piece ", id,
             " has a non-finite score");
    VQ_CHECK(len >= 0 && len <= 65536, FormatError, "tokenizer '", path, "': piece ", id,
             " has byte length ", len, ", outside [0, 65536]");
    VQ_CHECK(size - pos >= len, FormatError, "tokenizer '", path, "' is truncated inside piece ",
             id, ": its ", len, " bytes run past the end of the file (", size - pos, " left)");
    std::string p(static_cast<size_t>(len), '\0');
    f.read(p.data(), len);
    VQ_CHECK(f.good(), IoError, "failed reading tokenizer '", path, "'");
    pos += len;
    pieces.push_back(std::move(p));
    scores.push_back(score);
  }
  VQ_CHECK(pos == size, FormatError, "tokenizer '", path, "' has ", size - pos,
           " bytes after its last piece (", pieces.size(), " pieces read",
           vocab_size > 0 ? detail::cat(", the model's vocabulary size") : std::string(),
           "): a tokenizer with a larger vocabulary (another model's?) or a padded file");
  VQ_CHECK(pieces.size() >= 3, FormatError, "tokenizer '", path, "' holds ", pieces.size(),
           " pieces; at least 3 (<unk>, BOS, EOS) are required");
  Tokenizer t = from_pieces(std::move(pieces), std::move(scores));
  t.max_len_ = max_len;
  return t;
}

Tokenizer Tokenizer::from_pieces(std::vector<std::string> pieces, std::vector<float> scores) {
  VQ_CHECK(pieces.size() == scores.size(), InvalidArgument, "Tokenizer: ", pieces.size(),
           " pieces but ", scores.size(), " scores");
  VQ_CHECK(pieces.size() >= 3, InvalidArgument, "Tokenizer: ", pieces.size(),
           " pieces; at least 3 (<unk>, BOS, EOS) are required");
  Tokenizer t;
  t.pieces_ = std::move(pieces);
  t.scores_ = std::move(scores);
  t.index();
  return t;
}

void Tokenizer::index() {
  sorted_.resize(pieces_.size());
  for (size_t i = 0; i < sorted_.size(); ++i) sorted_[i] = static_cast<int32_t>(i);
  std::stable_sort(sorted_.begin(), sorted_.end(),
                   [&](int32_t a, int32_t b) { return pieces_[a] < pieces_[b]; });
  max_len_ = 0;
  for (const auto& p : pieces_) max_len_ = std::max<int64_t>(max_len_, p.size());
  byte_fallback_ = pieces_.size() >= 259;
  for (int b = 0; b < 256 && byte_fallback_; ++b)
    byte_fallback_ = byte_piece_value(pieces_[static_cast<size_t>(b + 3)]) == b;
}

const std::string& Tokenizer::piece(int32_t id) const {
  VQ_CHECK(id >= 0 && id < vocab_size(), InvalidArgument, "token id ", id,
           " is outside the vocabulary [0, ", vocab_size(), ")");
  return pieces_[static_cast<size_t>(id)];
}

float Tokenizer::score(int32_t id) const {
  piece(id);
  return scores_[static_cast<size_t>(id)];
}

int32_t Tokenizer::find(std::string_view p) const {
  auto it =
      std::lower_bound(sorted_.begin(), sorted_.end(), p, [&](int32_t id, std::string_view x) {
        return std::string_view(pieces_[static_cast<size_t>(id)]) < x;
      });
  if (it != sorted_.end() && pieces_[static_cast<size_t>(*it)] == p) return *it;
  return -1;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool bos, bool eos) const {
  std::vector<int32_t> out;
  if (bos) out.push_back(kBos);
  if (!text.empty()) {
    // 1. Characters (a UTF-8 lead byte with up to three continuation bytes) to pieces.
    std::vector<int32_t> sym;
    sym.reserve(text.size() + 1);
    auto emit = [&](std::string_view chunk) {
      const int32_t id = find(chunk);
      if (id >= 0) {
        sym.push_back(id);
        return;
      }
      for (unsigned char c : chunk)
        sym.push_back(byte_fallback_ ? static_cast<int32_t>(c) + 3 : kUnk);
    };
    emit(" ");  // the dummy prefix
    size_t start = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) start = i;
      const size_t len = i - start + 1;
      const bool more = i + 1 < text.size() &&
                        (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80 && len < 4;
      if (more) continue;
      emit(text.substr(start, len));
      start = i + 1;
    }

    // 2. Merges, best score first, leftmost on ties.
    const int64_t n = static_cast<int64_t>(sym.size());
    std::vector<int64_t> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
    std::vector<char> alive(static_cast<size_t>(n), 1);
    for (int64_t i = 0; i < n; ++i) {
      prev[static_cast<size_t>(i)] = i - 1;
      next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
    }
    struct Cand {
      float score;
      int64_t left, right;
      int32_t ltok, rtok, merged;
    };
    auto worse = [](const Cand& a, const Cand& b) {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> heap(worse);
    std::string buf;
    auto consider = [&](int64_t l, int64_t r) {
      if (l < 0 || r < 0) return;
      const int32_t a = sym[static_cast<size_t>(l)], b = sym[static_cast<size_t>(r)];
      const std::string& pa = pieces_[static_cast<size_t>(a)];
      const std::string& pb = pieces_[static_cast<size_t>(b)];
      if (static_cast<int64_t>(pa.size() + pb.size()) > max_len_) return;
      buf.assign(pa);
      buf += pb;
      const int32_t id = find(buf);
      if (id < 0) return;
      const float s = scores_[static_cast<size_t>(id)];
      if (!(s > -1e10f)) return;  // llama2.c's floor: such pairs never merge
      heap.push(Cand{s, l, r, a, b, id});
    };
    for (int64_t i = 0; i + 1 < n; ++i) consider(i, i + 1);
    while (!heap.empty()) {
      const Cand c = heap.top();
      heap.pop();
      const size_t l = static_cast<size_t>(c.left), r = static_cast<size_t>(c.right);
      if (!alive[l] || !alive[r] || next[l] != c.right || sym[l] != c.ltok || sym[r] != c.rtok)
        continue;  // stale
      sym[l] = c.merged;
      alive[r] = 0;
      next[l] = next[r];
      if (next[r] >= 0) prev[static_cast<size_t>(next[r])] = c.left;
      consider(prev[l], c.left);
      consider(c.left, next[l]);
    }
    for (int64_t i = 0; i >= 0; i = next[static_cast<size_t>(i)])
      out.push_back(sym[static_cast<size_t>(i)]);
  }
  if (eos) out.push_back(kEos);
  return out;
}

std::string Tokenizer::decode_piece(int32_t prev, int32_t token) const {
  const std::string& p = piece(token);
  if (token == kBos || token == kEos) return {};
  const int b = byte_piece_value(p);
  std::string s = b >= 0 ? std::string(1, static_cast<char>(b)) : p;
  if (prev == kBos && !s.empty() && s[0] == ' ') s.erase(0, 1);
  return s;
}

std::string Tokenizer::decode(const std::vector<int32_t>& tokens, bool after_bos) const {
  std::string out;
  int32_t prev = after_bos ? kBos : -1;
  for (int32_t t : tokens) {
    out += decode_piece(prev, t);
    prev = t;
  }
  return out;
}

}  // namespace vq

// The pieces the vocabulary-based tokenizers share: a vocabulary (text <-> id, token types),
// special-token partitioning of the input, and a greedy pair-merge engine used by both
// SentencePiece-style BPE (merge the pair whose merged token scores highest) and GPT-2 BPE
// (merge the pair with the lowest merge rank).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vq::tok {

/// GGUF token types (tokenizer.ggml.token_type).
enum TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

struct Vocab {
  std::vector<std::string> text;  ///< id -> piece
  std::vector<int32_t> type;      ///< id -> TokenType (kNormal when the file has none)
  std::unordered_map<std::string, int32_t> id;  ///< piece -> id (the last id wins on duplicates)

  void build_index();
  int32_t find(std::string_view s) const {
    auto it = id.find(std::string(s));
    return it == id.end() ? -1 : it->second;
  }
  int64_t size() const { return static_cast<int64_t>(text.size()); }
};

/// One fragment of the input after special-token partitioning: raw text, or a token id.
struct Fragment {
  int32_t token = -1;  ///< >= 0: a special token
  std::string text;
};

/// Split `text` at every occurrence of the special tokens (ids in `specials`, tried longest
/// first, each splitting every raw fragment left to right).
std::vector<Fragment> partition_specials(std::string_view text, const Vocab& v,
                                         const std::vector<int32_t>& specials);

/// Greedy merge of adjacent symbols. `priority(merged_text, left, right)` returns the pair's
/// priority (higher merges first; ties merge the leftmost pair first) or nullopt when the pair
/// cannot merge. Returns the final symbols.
std::vector<std::string> merge_symbols(
    std::vector<std::string> symbols,
    const std::function<std::optional<double>(const std::string&, const std::string&,
                                              const std::string&)>& priority);

}  // namespace vq::tok

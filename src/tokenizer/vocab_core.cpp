#include "tokenizer/vocab_core.hpp"

#include <algorithm>
#include <queue>

namespace vq::tok {

void Vocab::build_index() {
  id.clear();
  id.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) id[text[i]] = static_cast<int32_t>(i);
}

std::vector<Fragment> partition_specials(std::string_view text, const Vocab& v,
                                         const std::vector<int32_t>& specials) {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;  // empty input: no fragments, no tokens (not even a space prefix)
  frags.push_back({-1, std::string(text)});
  std::vector<int32_t> order = specials;
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return v.text[a].size() > v.text[b].size(); });
  for (int32_t sid : order) {
    const std::string& s = v.text[sid];
    if (s.empty()) continue;
    std::vector<Fragment> next;
    for (Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(std::move(f));
        continue;
      }
      size_t start = 0;
      while (true) {
        const size_t hit = f.text.find(s, start);
        if (hit == std::string::npos) break;
        if (hit > start) next.push_back({-1, f.text.substr(start, hit - start)});
        next.push_back({sid, {}});
        start = hit + s.size();
      }
      if (start < f.text.size()) next.push_back({-1, f.text.substr(start)});
    }
    frags.swap(next);
  }
  return frags;
}

std::vector<std::string> merge_symbols(
    std::vector<std::string> symbols,
    const std::function<std::optional<double>(const std::string&, const std::string&,
                                              const std::string&)>& priority) {
  const int n = static_cast<int>(symbols.size());
  if (n < 2) return symbols;
  std::vector<int> prev(n), next(n);
  std::vector<size_t> len(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
    len[i] = symbols[i].size();
  }
  struct Pair {
    double pri;
    int left, right;
    size_t size;
  };
  auto worse = [](const Pair& a, const Pair& b) {
    return a.pri < b.pri || (a.pri == b.pri && a.left > b.left);
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(worse)> q(worse);
  auto try_pair = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    std::string merged = symbols[l] + symbols[r];
    if (auto p = priority(merged, symbols[l], symbols[r])) q.push({*p, l, r, merged.size()});
  };
  for (int i = 0; i + 1 < n; ++i) try_pair(i, i + 1);
  while (!q.empty()) {
    const Pair p = q.top();
    q.pop();
    // Skip pairs made stale by an earlier merge.
    if (len[p.left] == 0 || len[p.right] == 0 || next[p.left] != p.right ||
        len[p.left] + len[p.right] != p.size)
      continue;
    symbols[p.left] += symbols[p.right];
    symbols[p.right].clear();
    len[p.left] += len[p.right];
    len[p.right] = 0;
    next[p.left] = next[p.right];
    if (next[p.right] >= 0) prev[next[p.right]] = p.left;
    try_pair(prev[p.left], p.left);
    try_pair(p.left, next[p.left]);
  }
  std::vector<std::string> out;
  for (int i = 0; i >= 0 && i < n; i = next[i]) out.push_back(std::move(symbols[i]));
  return out;
}

}  // namespace vq::tok

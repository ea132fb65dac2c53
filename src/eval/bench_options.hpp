// Options a benchmark passes through to a method spec ("--kvtc-options", "--curdkv-options").
#pragma once

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <string>

#include "veloxquant/errors.hpp"

namespace vq::bench {

/// Refuses (InvalidArgument, naming the key) extra "key=value,..." options that set one of the
/// keys the benchmark sets itself on every row (its sweep variables), and any text that would
/// turn the one method into several: ';' (a list of specs) or a '+' that starts a method id (a
/// composition; a number's exponent sign, as in 1e+3, is fine).
inline void check_extra_options(const char* bench, const std::string& extra,
                                std::initializer_list<const char*> owned) {
  for (size_t i = 0; i < extra.size(); ++i) {
    const char c = extra[i];
    const bool joins =
        c == ';' ||
        (c == '+' && i + 1 < extra.size() &&
         (std::isalpha(static_cast<unsigned char>(extra[i + 1])) || extra[i + 1] == '_'));
    VQ_CHECK(!joins, InvalidArgument, bench, ": the extra options '", extra, "' hold '", c, "' at ",
             i, "; they are key=value pairs of the one method the benchmark runs");
  }
  size_t at = 0;
  while (at < extra.size()) {
    const size_t end = std::min(extra.find(',', at), extra.size());
    const std::string item = extra.substr(at, end - at);
    const std::string key = item.substr(0, item.find('='));
    for (const char* k : owned)
      VQ_CHECK(key != k, InvalidArgument, bench, ": the extra options '", extra, "' set '", k,
               "', which the benchmark sets on every row; leave it out");
    at = end + 1;
  }
}

}  // namespace vq::bench

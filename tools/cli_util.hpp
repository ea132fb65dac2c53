// Helpers shared by the CLI subcommands: verbosity, JSON output, tables, progress on stderr.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "veloxquant/errors.hpp"

namespace vqcli {

struct Globals {
  int verbosity = 1;  // 0 = -q, 1 = default, 2 = -v
};

/// Write JSON to `path` ("-" = stdout). Throws vq::IoError when the file cannot be written.
void write_json(const std::string& path, const nlohmann::json& j);

/// A plain aligned text table.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::FILE* out = stdout) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

/// printf-style number formatting.
std::string fmt(const char* f, double x);

/// Progress line on stderr, only when stderr is a terminal and verbosity > 0, at most ~5 per
/// second; finish() clears it.
class Progress {
 public:
  Progress(const Globals& g, std::string label, int64_t total);
  void update(int64_t done);
  void finish();
  ~Progress() { finish(); }

 private:
  bool enabled_;
  std::string label_;
  int64_t total_;
  double last_ = -1;
  bool shown_ = false;
};

}  // namespace vqcli

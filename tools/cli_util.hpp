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

/// --threads N on a command that runs the engine or the weight kernels: the thread count of the
/// parallel loops (vq::set_thread_count), set while the command line is parsed, before the
/// command runs. Default: every core (std::thread::hardware_concurrency). A value outside
/// [1, vq::kMaxThreads] is refused with an error naming it.
void add_threads_option(CLI::App* cmd);

/// A validator for --seed: a decimal integer in [0, 2^64 - 1], written out (CLI11 alone takes
/// "-1" as 2^64 - 1, a longer number as the largest, and "" as 0).
CLI::Validator seed_validator();

/// Write JSON to `path` ("-" = stdout), atomically (temporary file + rename). Throws
/// vq::IoError when the file cannot be written.
void write_json(const std::string& path, const nlohmann::json& j);

/// Write `bytes` to `path` atomically (temporary file in the same directory + rename), or to
/// stdout when path is "-".
void write_output(const std::string& path, const std::vector<uint8_t>& bytes);

/// Refuse (vq::InvalidArgument, naming both paths) when `out` names the same file as `in`: the
/// same path, a symlink to it or a hard link (compared by device and inode), so a command never
/// overwrites one of its own inputs. "-" (stdout) and paths that do not exist yet never clash.
void check_distinct_paths(const std::string& in, const char* in_what, const std::string& out,
                          const char* out_what);

/// A named path of a command: what it is ("input", "--json", ...) and the path (may be empty).
struct NamedPath {
  const char* what;
  std::string path;
};
/// Refuse an output path that cannot be written, before any work: a directory (InvalidArgument),
/// or a path whose directory does not exist or does not take new files (IoError, naming both).
/// Empty paths and "-" pass; devices and FIFOs are written in place and pass.
void check_writable(const NamedPath& output);
/// check_writable for every output, then check_distinct_paths for every (input, output) pair and
/// every pair of outputs.
void check_io_paths(const std::vector<NamedPath>& inputs, const std::vector<NamedPath>& outputs);

/// After a benchmark printed its rows: throws vq::InvalidArgument (so the command exits 1) when
/// there was at least one row and every row holds an error, quoting the first. Rows: anything
/// with .error and .method or .spec.
template <typename Rows>
void refuse_if_all_failed(const char* what, const Rows& rows) {
  if (rows.empty()) return;
  for (const auto& r : rows)
    if (r.error.empty()) return;
  VQ_THROW(vq::InvalidArgument, what, ": every row failed (", rows.size(),
           "); the first: ", rows.front().error);
}

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

/// Progress on stderr when verbosity > 0 (off with -q): on a terminal a line redrawn at most
/// ~5 times per second and cleared by finish(); otherwise (a log, a pipe) one plain line at most
/// every kQuietSeconds, the first only once the work has run that long, so short runs stay silent.
class Progress {
 public:
  static constexpr double kQuietSeconds = 5.0;
  Progress(const Globals& g, std::string label, int64_t total);
  void update(int64_t done);
  void finish();
  ~Progress() { finish(); }

 private:
  bool enabled_;
  bool tty_;
  std::string label_;
  int64_t total_;
  double start_ = 0;
  double last_ = -1;
  bool shown_ = false;
};

}  // namespace vqcli

#include "cli_util.hpp"

#include "veloxquant/threads.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "veloxquant/vqkv.hpp"

namespace vqcli {

CLI::Validator seed_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ec != std::errc() || end != s.data() + s.size())
          return "'" + s + "' is not a decimal integer in [0, 18446744073709551615]";
        return "";
      },
      "UINT64");
}

void write_json(const std::string& path, const nlohmann::json& j) {
  if (path == "-") {
    std::cout << j.dump(2) << "\n";
    return;
  }
  const std::string text = j.dump(2) + "\n";
  vq::write_file_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

void write_output(const std::string& path, const std::vector<uint8_t>& bytes) {
  if (path != "-") {
    vq::write_file_bytes(path, bytes);
    return;
  }
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), stdout) == bytes.size() &&
                  std::fflush(stdout) == 0;
  VQ_CHECK(ok, vq::IoError, "failed writing ", bytes.size(), " bytes to stdout");
}

void check_distinct_paths(const std::string& in, const char* in_what, const std::string& out,
                          const char* out_what) {
  if (in.empty() || out.empty() || in == "-" || out == "-") return;
  struct stat a {
  }, b{};
  const bool same = in == out || (::stat(in.c_str(), &a) == 0 && ::stat(out.c_str(), &b) == 0 &&
                                  a.st_dev == b.st_dev && a.st_ino == b.st_ino);
  VQ_CHECK(!same, vq::InvalidArgument, out_what, " '", out, "' is the same file as ", in_what, " '",
           in, "'; writing it would destroy the input: choose another output path");
}

void check_writable(const NamedPath& o) {
  if (o.path.empty() || o.path == "-") return;
  struct stat st {};
  if (::stat(o.path.c_str(), &st) == 0) {
    VQ_CHECK(!S_ISDIR(st.st_mode), vq::InvalidArgument, o.what, " '", o.path,
             "' is a directory; name a file to write");
    if (!S_ISREG(st.st_mode)) return;  // a device or FIFO: written in place
  }
  // the file is written beside its target and renamed over it: the directory must take files
  std::string target = o.path;
  if (char* real = ::realpath(o.path.c_str(), nullptr)) {  // an existing file or symlink
    target = real;
    std::free(real);
  }
  const size_t slash = target.find_last_of('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : target.substr(0, slash));
  struct stat ds {};
  VQ_CHECK(::stat(dir.c_str(), &ds) == 0 && S_ISDIR(ds.st_mode), vq::IoError, "cannot write ",
           o.what, " '", o.path, "': the directory '", dir, "' does not exist");
  VQ_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, vq::IoError, "cannot write ", o.what, " '",
           o.path, "': the directory '", dir, "' does not take new files (", std::strerror(errno),
           ")");
}

void check_io_paths(const std::vector<NamedPath>& inputs, const std::vector<NamedPath>& outputs) {
  // every output checked before the command does any work: a bad second output (--json, --plot)
  // must not fail the command after its first output was written
  for (const NamedPath& o : outputs) check_writable(o);
  for (size_t o = 0; o < outputs.size(); ++o) {
    for (const NamedPath& i : inputs)
      check_distinct_paths(i.path, i.what, outputs[o].path, outputs[o].what);
    for (size_t p = 0; p < o; ++p)
      check_distinct_paths(outputs[p].path, outputs[p].what, outputs[o].path, outputs[o].what);
  }
  int stdout_users = 0;
  for (const NamedPath& o : outputs) stdout_users += o.path == "-";
  VQ_CHECK(stdout_users <= 1, vq::InvalidArgument,
           "more than one output goes to stdout ('-'); send all but one to files");
}

void Table::print(std::FILE* out) const {
  std::vector<size_t> w(header_.size(), 0);
  for (size_t c = 0; c < header_.size(); ++c) w[c] = header_[c].size();
  for (const auto& r : rows_)
    for (size_t c = 0; c < r.size() && c < w.size(); ++c) w[c] = std::max(w[c], r[c].size());
  auto line = [&](const std::vector<std::string>& r) {
    for (size_t c = 0; c < w.size(); ++c) {
      const std::string cell = c < r.size() ? r[c] : "";
      std::fprintf(out, "%s%-*s", c ? "  " : "", static_cast<int>(w[c]), cell.c_str());
    }
    std::fprintf(out, "\n");
  };
  line(header_);
  std::vector<std::string> sep;
  for (size_t c = 0; c < w.size(); ++c) sep.push_back(std::string(w[c], '-'));
  line(sep);
  for (const auto& r : rows_) line(r);
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

static double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Progress::Progress(const Globals& g, std::string label, int64_t total)
    : enabled_(g.verbosity > 0),
      tty_(isatty(2) != 0),
      label_(std::move(label)),
      total_(total),
      start_(now_s()) {}

void Progress::update(int64_t done) {
  if (!enabled_) return;
  const double t = now_s();
  if (!tty_) {
    if (t - start_ < kQuietSeconds || (last_ >= 0 && t - last_ < kQuietSeconds)) return;
    last_ = t;
    std::fprintf(
        stderr, "%s: %lld/%lld (%.0f%%) after %.0f s\n", label_.c_str(),
        static_cast<long long>(done), static_cast<long long>(total_),
        total_ > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0,
        t - start_);
    std::fflush(stderr);
    return;
  }
  if (last_ >= 0 && t - last_ < 0.2 && done < total_) return;
  last_ = t;
  shown_ = true;
  std::fprintf(
      stderr, "\r%s: %lld/%lld (%.0f%%)   ", label_.c_str(), static_cast<long long>(done),
      static_cast<long long>(total_),
      total_ > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0);
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_ && tty_ && shown_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    shown_ = false;
  }
}

void add_threads_option(CLI::App* cmd) {
  cmd->add_option_function<int>(
         "--threads",
         [](const int& n) {
           VQ_CHECK(n >= 1 && n <= vq::kMaxThreads, vq::InvalidArgument, "--threads ", n,
                    " is outside [1, ", vq::kMaxThreads, "]");
           vq::set_thread_count(n);
         },
         "threads for the weight products, attention, the caches' per-head work, codecs and eval "
         "windows (results are the same for any count)")
      ->default_str(std::to_string(vq::default_thread_count()));
}

}  // namespace vqcli

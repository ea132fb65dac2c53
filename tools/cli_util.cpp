#include "cli_util.hpp"

#include <unistd.h>

#include <chrono>
#include <iostream>

namespace vqcli {

void write_json(const std::string& path, const nlohmann::json& j) {
  if (path == "-") {
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::ofstream f(path);
  VQ_CHECK(f.good(), vq::IoError, "cannot open '", path, "' for writing");
  f << j.dump(2) << "\n";
  VQ_CHECK(f.good(), vq::IoError, "failed writing '", path, "'");
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
    : enabled_(g.verbosity > 0 && isatty(2)), label_(std::move(label)), total_(total) {}

void Progress::update(int64_t done) {
  if (!enabled_) return;
  const double t = now_s();
  if (last_ >= 0 && t - last_ < 0.2 && done < total_) return;
  last_ = t;
  shown_ = true;
  std::fprintf(stderr, "\r%s: %lld/%lld (%.0f%%)   ", label_.c_str(), static_cast<long long>(done),
               static_cast<long long>(total_),
               total_ > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0);
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_ && shown_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    shown_ = false;
  }
}

}  // namespace vqcli

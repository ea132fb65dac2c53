// vq_stress: long-run stress of the caches (a benchmark-style program, not a test).
//
//   vq_stress [--steps N] [--kvtc-tokens N] [--max-seconds S] [--methods a,b] [--json FILE]
//
// Eviction family: every registered eviction method with a `budget` option is built as
// "<id>:budget=256" for one head (B = H = 1, D = 16) and fed one decode token per step, with one
// query row, for --steps steps (default 1,000,000) or until --max-seconds (default 120) have
// passed. After every step: the kept count is <= 256 and every kept position lies in [0, offset);
// every 1,000 steps and at the end: the kept positions, sorted, are strictly increasing and
// distinct, and each kept key/value row equals exactly the row that was fed at that position (the
// stream is a deterministic function of the position, so nothing needs to be stored to check it).
// Each method runs in its own process (this program re-executes itself with --child), so the
// peak resident set (VmHWM from /proc/self/status) reported at 10,000 steps and at the end belongs
// to that method alone.
// kvtc: the kvtc cache (default options, D = 16) fed one token per step for --kvtc-tokens tokens
// (default 200,000); stored bytes per token (stats().kept_bytes / tokens) sampled along the way.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "veloxquant/cache.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/tensor.hpp"

namespace {

constexpr int64_t kD = 16;

// Head (0, 0) of a cache decoded: positions, keys and values in slot order.
struct HV {
  int64_t n = 0;
  const int64_t* positions = nullptr;
  std::vector<float> k, v;
  const float* keys = nullptr;
  const float* values = nullptr;
};
HV head_view(const vq::KVCache& c) {
  HV hv;
  hv.n = c.kept(0, 0);
  hv.positions = c.positions(0, 0);
  hv.k.resize(static_cast<size_t>(hv.n * c.head_dim()));
  hv.v.resize(hv.k.size());
  c.keys(0, 0).read(0, hv.n, hv.k.data());
  c.values(0, 0).read(0, hv.n, hv.v.data());
  hv.keys = hv.k.data();
  hv.values = hv.v.data();
  return hv;
}
constexpr int64_t kBudget = 256;

/// VmHWM / VmRSS of this process in KiB (0 if /proc is unavailable).
int64_t proc_status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line)) {
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':') {
      return std::strtoll(line.c_str() + n + 1, nullptr, 10);
    }
  }
  return 0;
}

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
/// Element d of stream `which` (0 keys, 1 values, 2 queries) at position p: uniform in [-1, 1)
/// plus a slowly rotating per-channel offset, so scores drift and evictions keep happening.
/// Not inlined: one compiled copy serves both the feeding and the checking, so a compiler that
/// contracts `a * b + c` into an FMA at one inlined call site and not at another cannot make the
/// check see a value 1 ulp away from what was fed (that happened with GCC's default
/// -ffp-contract=fast under -march=native).
[[gnu::noinline]] float stream_value(int which, int64_t p, int64_t d) {
  const uint64_t h = mix((static_cast<uint64_t>(p) * 3 + static_cast<uint64_t>(which)) * 64 +
                         static_cast<uint64_t>(d));
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0;
  const double drift = 0.5 * std::sin(static_cast<double>(p) * 1e-3 + static_cast<double>(d));
  return static_cast<float>(u + drift);
}
void fill(vq::Tensor& t, int which, int64_t p) {
  for (int64_t d = 0; d < kD; ++d) t.at(0, 0, 0, d) = stream_value(which, p, d);
}

struct Result {
  std::string method;
  std::string spec;
  int64_t steps_done = 0;
  int64_t steps_target = 0;
  double seconds = 0;
  int64_t max_kept = 0;
  int64_t kept_at_end = 0;
  int64_t hwm_10k_kib = 0;
  int64_t hwm_end_kib = 0;
  int64_t rss_end_kib = 0;
  int64_t full_checks = 0;
  std::string error;  // empty = every check passed
  double bytes_per_token_10k = 0, bytes_per_token_end = 0, bytes_per_token_min = 0,
         bytes_per_token_max = 0;
};

std::string to_line(const Result& r) {
  std::ostringstream os;
  os << r.method << '\t' << r.spec << '\t' << r.steps_done << '\t' << r.steps_target << '\t'
     << r.seconds << '\t' << r.max_kept << '\t' << r.kept_at_end << '\t' << r.hwm_10k_kib << '\t'
     << r.hwm_end_kib << '\t' << r.rss_end_kib << '\t' << r.full_checks << '\t'
     << r.bytes_per_token_10k << '\t' << r.bytes_per_token_end << '\t' << r.bytes_per_token_min
     << '\t' << r.bytes_per_token_max << '\t' << (r.error.empty() ? "ok" : r.error);
  return os.str();
}
Result from_line(const std::string& line) {
  Result r;
  std::istringstream is(line);
  std::string f;
  std::vector<std::string> v;
  while (std::getline(is, f, '\t')) v.push_back(f);
  if (v.size() != 16) {
    r.error = "child printed a malformed result line";
    return r;
  }
  r.method = v[0];
  r.spec = v[1];
  r.steps_done = std::stoll(v[2]);
  r.steps_target = std::stoll(v[3]);
  r.seconds = std::stod(v[4]);
  r.max_kept = std::stoll(v[5]);
  r.kept_at_end = std::stoll(v[6]);
  r.hwm_10k_kib = std::stoll(v[7]);
  r.hwm_end_kib = std::stoll(v[8]);
  r.rss_end_kib = std::stoll(v[9]);
  r.full_checks = std::stoll(v[10]);
  r.bytes_per_token_10k = std::stod(v[11]);
  r.bytes_per_token_end = std::stod(v[12]);
  r.bytes_per_token_min = std::stod(v[13]);
  r.bytes_per_token_max = std::stod(v[14]);
  r.error = v[15] == "ok" ? "" : v[15];
  return r;
}

/// Sorted positions strictly increasing, and each kept row equal to what was fed there.
std::string full_check(const vq::KVCache& c) {
  const HV hv = head_view(c);
  std::vector<int64_t> pos(hv.positions, hv.positions + hv.n);
  std::sort(pos.begin(), pos.end());
  for (size_t i = 1; i < pos.size(); ++i) {
    if (pos[i] <= pos[i - 1]) return "position " + std::to_string(pos[i]) + " kept twice";
  }
  for (int64_t i = 0; i < hv.n; ++i) {
    const int64_t p = hv.positions[i];
    for (int64_t d = 0; d < kD; ++d) {
      if (hv.keys[i * kD + d] != stream_value(0, p, d) ||
          hv.values[i * kD + d] != stream_value(1, p, d)) {
        return "kept row for position " + std::to_string(p) + " differs from the row fed there";
      }
    }
  }
  const vq::FetchResult f = c.fetch();
  for (size_t i = 1; i < f.positions.size(); ++i) {
    if (f.positions[i] <= f.positions[i - 1]) return "fetch() positions not strictly increasing";
  }
  return "";
}

Result run_eviction(const std::string& method, int64_t steps, double max_seconds) {
  Result r;
  r.method = method;
  r.spec = method + ":budget=" + std::to_string(kBudget);
  r.steps_target = steps;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    auto cache = vq::make_cache(vq::CacheConfig::parse(r.spec), kD);
    vq::Tensor k(1, 1, 1, kD), v(1, 1, 1, kD), q(1, 1, 1, kD);
    for (int64_t p = 0; p < steps; ++p) {
      fill(k, 0, p);
      fill(v, 1, p);
      fill(q, 2, p);
      cache->update(k, v, &q);
      const HV hv = head_view(*cache);
      r.max_kept = std::max(r.max_kept, hv.n);
      if (hv.n > kBudget) {
        r.error = "kept " + std::to_string(hv.n) + " > budget at step " + std::to_string(p);
        break;
      }
      if (cache->offset() != p + 1) {
        r.error = "offset " + std::to_string(cache->offset()) + " after " + std::to_string(p + 1) +
                  " steps";
        break;
      }
      for (int64_t i = 0; i < hv.n; ++i) {
        if (hv.positions[i] < 0 || hv.positions[i] > p) {
          r.error = "kept position " + std::to_string(hv.positions[i]) + " outside [0, " +
                    std::to_string(p) + "]";
          break;
        }
      }
      if (!r.error.empty()) break;
      r.steps_done = p + 1;
      if ((p + 1) % 1000 == 0) {
        r.error = full_check(*cache);
        ++r.full_checks;
        if (!r.error.empty()) break;
        if (p + 1 == 10000) r.hwm_10k_kib = proc_status_kib("VmHWM");
        if ((p + 1) % 10000 == 0 &&
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
                max_seconds) {
          break;
        }
      }
    }
    if (r.error.empty()) {
      r.error = full_check(*cache);
      ++r.full_checks;
    }
    r.kept_at_end = cache->kept(0, 0);
  } catch (const std::exception& e) {
    r.error = std::string("exception: ") + e.what();
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.hwm_end_kib = proc_status_kib("VmHWM");
  r.rss_end_kib = proc_status_kib("VmRSS");
  return r;
}

Result run_kvtc(int64_t tokens, double max_seconds) {
  Result r;
  r.method = "kvtc";
  r.spec = "kvtc";
  r.steps_target = tokens;
  r.bytes_per_token_min = 1e300;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    auto cache = vq::make_cache(vq::CacheConfig::parse(r.spec), kD);
    vq::Tensor k(1, 1, 1, kD), v(1, 1, 1, kD);
    for (int64_t p = 0; p < tokens; ++p) {
      fill(k, 0, p);
      fill(v, 1, p);
      cache->update(k, v);
      r.steps_done = p + 1;
      r.max_kept = std::max(r.max_kept, cache->kept(0, 0));
      if ((p + 1) % 10000 == 0) {
        const vq::CacheStats s = cache->stats();
        const double bpt = s.kept_bytes / static_cast<double>(p + 1);
        if (p + 1 == 10000) {
          r.bytes_per_token_10k = bpt;
          r.hwm_10k_kib = proc_status_kib("VmHWM");
        }
        r.bytes_per_token_min = std::min(r.bytes_per_token_min, bpt);
        r.bytes_per_token_max = std::max(r.bytes_per_token_max, bpt);
        r.bytes_per_token_end = bpt;
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
            max_seconds)
          break;
      }
    }
    const HV hv = head_view(*cache);
    r.kept_at_end = hv.n;
    std::vector<int64_t> pos(hv.positions, hv.positions + hv.n);
    std::sort(pos.begin(), pos.end());
    for (size_t i = 0; i < pos.size() && r.error.empty(); ++i) {
      if (pos[i] != static_cast<int64_t>(i))
        r.error = "kvtc does not hold position " + std::to_string(i);
    }
    r.full_checks = 1;
  } catch (const std::exception& e) {
    r.error = std::string("exception: ") + e.what();
  }
  if (r.bytes_per_token_min > 1e299) r.bytes_per_token_min = 0;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.hwm_end_kib = proc_status_kib("VmHWM");
  r.rss_end_kib = proc_status_kib("VmRSS");
  return r;
}

/// Run one method in a child process (argv: self --child ...), read its result line.
Result run_child(const std::vector<std::string>& args, const std::string& method) {
  int fd[2];
  Result r;
  r.method = method;
  if (::pipe(fd) != 0) {
    r.error = "pipe failed";
    return r;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fd[1], 1);
    ::close(fd[0]);
    ::close(fd[1]);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    std::_Exit(127);
  }
  ::close(fd[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || out.empty()) {
    r.error = "child process failed (status " + std::to_string(status) + ")";
    return r;
  }
  return from_line(out);
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 1000000, kvtc_tokens = 200000;
  double max_seconds = 120;
  std::string only, json_path, child;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "vq_stress: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--steps")
      steps = std::stoll(next());
    else if (a == "--kvtc-tokens")
      kvtc_tokens = std::stoll(next());
    else if (a == "--max-seconds")
      max_seconds = std::stod(next());
    else if (a == "--methods")
      only = "," + next() + ",";
    else if (a == "--json")
      json_path = next();
    else if (a == "--child")
      child = next();
    else {
      std::fprintf(
          stderr,
          "usage: vq_stress [--steps N] [--kvtc-tokens N] [--max-seconds S] [--methods a,b] "
          "[--json FILE]\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (!child.empty()) {
    const Result r = child == "kvtc" ? run_kvtc(kvtc_tokens, max_seconds)
                                     : run_eviction(child, steps, max_seconds);
    std::printf("%s\n", to_line(r).c_str());
    return 0;
  }

  std::vector<std::string> todo;
  for (const vq::MethodInfo& m : vq::methods()) {
    if (m.family != vq::Family::Eviction || !vq::find_option(m, "budget")) continue;
    if (only.empty() || only.find("," + m.id + ",") != std::string::npos) todo.push_back(m.id);
  }
  if (only.empty() || only.find(",kvtc,") != std::string::npos) todo.push_back("kvtc");

  std::vector<Result> results;
  bool ok = true;
  std::printf("%-14s %10s %10s %9s %9s %6s %11s %11s %10s %s\n", "method", "steps", "target",
              "seconds", "steps/s", "max_n", "HWM@10k KiB", "HWM@end KiB", "B/token", "checks");
  for (const std::string& m : todo) {
    const Result r =
        run_child({argv[0], "--child", m, "--steps", std::to_string(steps), "--kvtc-tokens",
                   std::to_string(kvtc_tokens), "--max-seconds", std::to_string(max_seconds)},
                  m);
    ok = ok && r.error.empty();
    std::printf("%-14s %10lld %10lld %9.1f %9.0f %6lld %11lld %11lld %10s %s\n", r.method.c_str(),
                static_cast<long long>(r.steps_done), static_cast<long long>(r.steps_target),
                r.seconds, r.seconds > 0 ? static_cast<double>(r.steps_done) / r.seconds : 0.0,
                static_cast<long long>(r.max_kept), static_cast<long long>(r.hwm_10k_kib),
                static_cast<long long>(r.hwm_end_kib),
                r.method == "kvtc" ? (std::to_string(r.bytes_per_token_10k).substr(0, 6) + ".." +
                                      std::to_string(r.bytes_per_token_end).substr(0, 6))
                                         .c_str()
                                   : "-",
                r.error.empty() ? ("ok (" + std::to_string(r.full_checks) + " full)").c_str()
                                : r.error.c_str());
    std::fflush(stdout);
    results.push_back(r);
  }
  if (!json_path.empty()) {
    std::ofstream js(json_path);
    js << "{\n  \"head_dim\": " << kD << ",\n  \"budget\": " << kBudget << ",\n  \"results\": [\n";
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      js << "    {\"method\": \"" << r.method << "\", \"spec\": \"" << json_escape(r.spec)
         << "\", \"steps_done\": " << r.steps_done << ", \"steps_target\": " << r.steps_target
         << ", \"seconds\": " << r.seconds << ", \"max_kept\": " << r.max_kept
         << ", \"kept_at_end\": " << r.kept_at_end << ", \"vm_hwm_10k_kib\": " << r.hwm_10k_kib
         << ", \"vm_hwm_end_kib\": " << r.hwm_end_kib << ", \"vm_rss_end_kib\": " << r.rss_end_kib
         << ", \"full_checks\": " << r.full_checks;
      if (r.method == "kvtc") {
        js << ", \"bytes_per_token_10k\": " << r.bytes_per_token_10k
           << ", \"bytes_per_token_end\": " << r.bytes_per_token_end
           << ", \"bytes_per_token_min\": " << r.bytes_per_token_min
           << ", \"bytes_per_token_max\": " << r.bytes_per_token_max;
      }
      js << ", \"error\": \"" << json_escape(r.error) << "\"}"
         << (i + 1 < results.size() ? "," : "") << "\n";
    }
    js << "  ]\n}\n";
  }
  return ok ? 0 : 1;
}

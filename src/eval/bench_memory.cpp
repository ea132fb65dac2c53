#include "eval/bench_memory.hpp"

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "eval/bench_speed.hpp"
#include "veloxquant/cache.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/registry.hpp"
#include "veloxquant/tensor.hpp"

namespace vq::bench {

namespace {

int64_t heap_live() {
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<int64_t>(mi.uordblks + mi.hblkhd);
}

int64_t peak_rss() {  // VmHWM in bytes
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

int64_t current_rss() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

// Resets VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs).
void reset_peak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

struct Inputs {
  Tensor K, V, Q;
};

Inputs make_inputs(const MemoryOptions& o) {
  Inputs in{Tensor(1, o.heads, o.tokens, o.dim), Tensor(1, o.heads, o.tokens, o.dim),
            Tensor(1, o.query_heads, o.tokens, o.dim)};
  for (int64_t h = 0; h < o.heads; ++h) {
    const auto k = realistic_kv(o.tokens, o.dim, 11 + static_cast<uint64_t>(h), true);
    const auto v = realistic_kv(o.tokens, o.dim, 101 + static_cast<uint64_t>(h), false);
    std::memcpy(in.K.head(0, h), k.data(), sizeof(float) * k.size());
    std::memcpy(in.V.head(0, h), v.data(), sizeof(float) * v.size());
  }
  const int64_t G = o.query_heads / o.heads;
  for (int64_t h = 0; h < o.query_heads; ++h) {  // queries near their group's keys
    const auto q = realistic_kv(o.tokens, o.dim, 1001 + static_cast<uint64_t>(h), true);
    const float* k = in.K.head(0, h / G);
    float* dst = in.Q.head(0, h);
    for (size_t i = 0; i < q.size(); ++i) dst[i] = 0.7f * k[i] + 0.3f * q[i];
  }
  return in;
}

MemoryRow measure(const std::string& spec, const MemoryOptions& o, const Inputs& in) {
  MemoryRow r;
  r.spec = spec;
  r.fp16_bytes = static_cast<double>(o.heads * o.tokens * o.dim * 2 * 2);
  const auto t0 = std::chrono::steady_clock::now();
  reset_peak();
  const int64_t rss0 = current_rss();
  const int64_t heap0 = heap_live();
  auto cache = make_cache(spec, o.dim);
  for (int64_t s = 0; s < o.tokens; s += o.update) {
    const int64_t n = std::min(o.update, o.tokens - s);
    const Tensor k = in.K.slice_tokens(s, n), v = in.V.slice_tokens(s, n),
                 q = in.Q.slice_tokens(s, n);
    cache->update(k, v, &q);
  }
  const CacheStats st = cache->stats();
  r.rss = static_cast<double>(peak_rss() - rss0);
  const int64_t held = heap_live();
  cache.reset();
  const int64_t after = heap_live();
  r.counted = static_cast<double>(held - after);
  r.scratch = static_cast<double>(after - heap0);
  r.reported = st.kept_bytes;
  r.tokens_kept = st.tokens_kept;
  r.content = st.content_bytes;
  r.params = st.codec_param_bytes;
  r.policy = st.policy_bytes;
  r.index = st.index_bytes;
  r.overhead = st.overhead_bytes;
  r.stored = st.stored_bytes;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// Runs measure() in a child process and reads its row back through a pipe (one line of numbers).
MemoryRow measure_isolated(const std::string& spec, const MemoryOptions& o, const Inputs& in) {
  int fd[2];
  VQ_CHECK(pipe(fd) == 0, Error, "bench memory: pipe() failed");
  const pid_t pid = fork();
  VQ_CHECK(pid >= 0, Error, "bench memory: fork() failed");
  if (pid == 0) {
    close(fd[0]);
    std::string line;
    try {
      const MemoryRow r = measure(spec, o, in);
      char buf[512];
      std::snprintf(buf, sizeof buf,
                    "ok %lld %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.6f %.0f\n",
                    static_cast<long long>(r.tokens_kept), r.reported, r.counted, r.rss, r.content,
                    r.params, r.policy, r.index, r.overhead, r.stored, r.seconds, r.scratch);
      line = buf;
    } catch (const std::exception& e) {
      line = std::string("error ") + e.what() + "\n";
    }
    const ssize_t w = write(fd[1], line.data(), line.size());
    (void)w;
    close(fd[1]);
    _exit(0);
  }
  close(fd[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  MemoryRow r;
  r.spec = spec;
  r.fp16_bytes = static_cast<double>(o.heads * o.tokens * o.dim * 2 * 2);
  long long kept = 0;
  if (out.rfind("ok ", 0) == 0 &&
      std::sscanf(out.c_str() + 3, "%lld %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf", &kept,
                  &r.reported, &r.counted, &r.rss, &r.content, &r.params, &r.policy, &r.index,
                  &r.overhead, &r.stored, &r.seconds, &r.scratch) == 12) {
    r.tokens_kept = kept;
  } else if (out.rfind("error ", 0) == 0) {
    r.error = out.substr(6, out.size() > 7 ? out.size() - 7 : 0);
  } else {
    r.error = "the measuring process ended abnormally (status " + std::to_string(status) + ")";
  }
  return r;
}

}  // namespace

std::vector<std::string> default_memory_specs(int64_t budget) {
  std::vector<std::string> out;
  const std::string b = ":budget=" + std::to_string(budget);
  for (const auto& m : methods()) {
    if (m.family == Family::Eviction && find_option(m, "budget") != nullptr)
      out.push_back(m.id + b);
    else
      out.push_back(m.id);
  }
  for (const char* codec : {"q8_0", "q4_0", "kivi", "kvtc"}) {
    const MethodInfo& m = find_method(codec);
    if (!m.make_row_codec) continue;
    out.push_back("snapkv" + b + "+" + codec);
    out.push_back("streaming_llm" + b + "+" + codec);
  }
  return out;
}

std::vector<MemoryRow> run_memory_bench(const MemoryOptions& o) {
  VQ_CHECK(o.heads >= 1 && o.heads <= 256 && o.tokens >= 1 && o.tokens <= (int64_t{1} << 22) &&
               o.dim >= 1 && o.dim <= 1024 && o.update >= 1 && o.query_heads >= o.heads &&
               o.query_heads % o.heads == 0,
           InvalidArgument, "bench memory: heads = ", o.heads, " (1..256), tokens = ", o.tokens,
           " (1..4194304), dim = ", o.dim, " (1..1024), update = ", o.update,
           " (>= 1), query heads = ", o.query_heads, " (a multiple of heads)");
  const Inputs in = make_inputs(o);
  std::vector<MemoryRow> rows;
  const std::vector<std::string> specs = o.specs.empty() ? default_memory_specs(o.budget) : o.specs;
  for (const std::string& s : specs) {
    if (o.progress) o.progress(s);
    rows.push_back(measure_isolated(s, o, in));
  }
  return rows;
}

}  // namespace vq::bench

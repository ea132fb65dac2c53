// Helpers for the model tests: temporary files, small random models, real-model lookup.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "veloxquant/model.hpp"

namespace vqtest {

/// A file path under the system temp dir that is removed when the object dies.
class TempFile {
 public:
  explicit TempFile(const std::string& tag) {
    path_ = (std::filesystem::temp_directory_path() /
             ("vq_model_test_" + std::to_string(::getpid()) + "_" + tag))
                .string();
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

  std::vector<char> read() const {
    std::ifstream f(path_, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(f), {});
  }
  void write(const std::vector<char>& bytes) const {
    std::ofstream f(path_, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

 private:
  std::string path_;
};

/// A small GQA config: dim 32, 4 query heads, 2 KV heads (head_dim 8), 2 layers.
inline vq::ModelConfig small_config(int64_t seq_len = 48, bool shared = true) {
  vq::ModelConfig c;
  c.dim = 32;
  c.hidden_dim = 48;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 40;
  c.seq_len = seq_len;
  c.shared_classifier = shared;
  return c;
}

/// A deterministic token sequence in [3, vocab).
inline std::vector<int32_t> some_tokens(int64_t n, int64_t vocab, uint64_t seed = 1) {
  std::vector<int32_t> t;
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  t.push_back(vq::Tokenizer::kBos);
  while (static_cast<int64_t>(t.size()) < n) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t.push_back(static_cast<int32_t>(3 + x % static_cast<uint64_t>(vocab - 3)));
  }
  return t;
}

/// What the CLI printed (stdout and stderr together) and its exit status (-1 when it could not
/// run or the build has no CLI).
struct CliRun {
  int status = -1;
  std::string out;
};

/// Whether the veloxquant CLI was built with the tests.
inline bool have_cli() {
#ifdef VQ_CLI_PATH
  return std::filesystem::exists(VQ_CLI_PATH);
#else
  return false;
#endif
}

/// Runs the veloxquant CLI built with the tests (VQ_CLI_PATH) with `args`.
inline CliRun run_cli(const std::string& args) {
  CliRun r;
#ifdef VQ_CLI_PATH
  const std::string cmd = std::string(VQ_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
#else
  (void)args;
#endif
  return r;
}

}  // namespace vqtest

/// Sets `var` to the path of a real model file, or skips the test when it is absent.
#define VQ_REQUIRE_MODEL_FILE(var, name)                                                \
  const std::string var = vq::locate_model_file(name);                                  \
  if (var.empty())                                                                      \
  GTEST_SKIP() << name << " not found (searched $VQ_MODELS_DIR and ../shared/models); " \
               << "see docs/eval.md for where to download it"

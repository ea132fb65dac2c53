// Finding the real model files. They are never committed; the project expects them in
// ../shared/models next to the project root, or in $VQ_MODELS_DIR, or at a path the user gives.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"

namespace vq {

namespace fs = std::filesystem;

namespace {

std::string raw_github(const char* repo, const char* commit, const char* path) {
  return detail::cat(repo, " @", commit, " : ", path, "  (https://raw.githubusercontent.com/", repo,
                     "/", commit, "/", path, ")");
}

// The source tree this file was compiled from: <root>/src/model/model_files.cpp.
fs::path source_root() {
  fs::path p(__FILE__);
  if (!p.is_absolute()) return {};
  return p.parent_path().parent_path().parent_path();
}

fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

}  // namespace

const std::vector<ModelFileInfo>& known_model_files() {
  static const std::vector<ModelFileInfo> files = {
      {"stories260K.bin",
       "llama2.c TinyStories model (karpathy/tinyllamas stories260K), 512-token context",
       raw_github("DaveBben/esp32-llm", "6baf21a8fec9bea1c222a35bd216bf96718dd3d6",
                  "data/stories260K.bin")},
      {"tok512.bin", "its 512-piece tokenizer",
       raw_github("DaveBben/esp32-llm", "6baf21a8fec9bea1c222a35bd216bf96718dd3d6",
                  "data/tok512.bin")},
      {"babyllama-char.bin", "character-level TinyStories model, head_dim 16, 256-token context",
       raw_github("EN10/BabyLlama", "792a5675980176710cd5d44cca6cfb3a44ed662b",
                  "tok105/model5000.bin")},
      {"tok105.bin",
       "its tokenizer: tok105.model converted to tokenizer.bin (llama2.c tokenizer.py export)",
       raw_github("EN10/BabyLlama", "792a5675980176710cd5d44cca6cfb3a44ed662b",
                  "tok105/tok105.model")},
      {"llama2xs.bin", "a second small TinyStories model (uses tok512.bin)",
       raw_github("saltyduckegg/llama2xs.c", "31ec9eb758c41319858bbba19e5a0202e155b87f",
                  "out/model.bin")},
      {"tinystories-val.txt", "first stories of the TinyStories validation split",
       raw_github("yuninxia/moe-routing-bench", "6877be50c1c389c73047d7f27104bee6a995efd6",
                  "data/tinystories_val.txt")},
  };
  return files;
}

std::vector<std::string> model_search_dirs() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("VQ_MODELS_DIR"); env != nullptr && *env != '\0')
    dirs.emplace_back(env);
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  if (!ec) dirs.push_back(cwd / ".." / "shared" / "models");
  const fs::path exe = executable_dir();
  if (!exe.empty()) dirs.push_back(exe.parent_path().parent_path() / ".." / "shared" / "models");
  const fs::path src = source_root();
  if (!src.empty()) dirs.push_back(src / ".." / "shared" / "models");
  std::vector<std::string> out;
  for (const auto& d : dirs) {
    const std::string s = fs::weakly_canonical(d, ec).string();
    const std::string name = ec ? d.lexically_normal().string() : s;
    bool seen = false;
    for (const auto& o : out) seen = seen || o == name;
    if (!seen) out.push_back(name);
  }
  return out;
}

std::string locate_model_file(const std::string& name) {
  std::error_code ec;
  for (const auto& d : model_search_dirs()) {
    const fs::path p = fs::path(d) / name;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return {};
}

std::string find_model_file(const std::string& name, const std::string& given) {
  if (!given.empty()) return given;
  const std::string found = locate_model_file(name);
  if (!found.empty()) return found;
  std::string dirs;
  for (const auto& d : model_search_dirs()) dirs += "\n  " + d;
  std::string how;
  for (const auto& f : known_model_files())
    if (f.name == name) how = detail::cat("\nget it from ", f.source, "\n(", f.what, ")");
  VQ_THROW(IoError, "model file '", name, "' not found; searched:", dirs,
           "\nput it in one of these directories (or set VQ_MODELS_DIR, or pass its path)", how,
           "\nsee docs/eval.md for the full list of files and their sha256");
}

std::string default_tokenizer_for(int64_t vocab_size) {
  if (vocab_size == 512) return "tok512.bin";
  if (vocab_size == 105) return "tok105.bin";
  return {};
}

}  // namespace vq

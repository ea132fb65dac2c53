// A small llama2.c-compatible inference engine whose per-layer KV caches are VeloxQuant caches.
//
//   Model      a llama2.c "legacy" checkpoint (header of 7 int32, then fp32 tensors), validated;
//              or (Model::open) a GGUF file / Hugging Face directory read through ModelWeights,
//              its matrices left in their stored type (F32 ... Q6_K) in the memory map (or the
//              file's copy in memory, FileLoad::Copy)
//   Tokenizer  the llama2.c tokenizer.bin format, with llama2.c / sentencepiece-style encode
//   Engine     forward pass with fp32 activations (RMSNorm, RoPE on adjacent pairs or half-split,
//              GQA, SwiGLU, optional q/k/v biases); matrices multiplied in their stored type by
//              src/kernels; every layer's attention runs over what that layer's KVCache keeps
//   find_model_file  where the real model files live ($VQ_MODELS_DIR or ../shared/models)
//
// The checkpoint and tokenizer formats are described in ../shared/models/README.md and in
// docs/eval.md. Shapes: dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "veloxquant/cache.hpp"
#include "veloxquant/config.hpp"
#include "veloxquant/model_weights.hpp"
#include "veloxquant/weight_matrix.hpp"

namespace vq {

/// Allocator with 64-byte alignment. SIMD kernels peel loops by pointer alignment, which changes
/// the summation order; buffers that always start on a 64-byte boundary make every run (and every
/// Engine over the same Model) produce bit-identical results.
template <typename T>
struct AlignedAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, kAlign); }
  template <typename U>
  bool operator==(const AlignedAllocator<U>&) const noexcept {
    return true;
  }
};
using AlignedFloats = std::vector<float, AlignedAllocator<float>>;

// ------------------------------------------------------------------------------------------------
// Model

/// Hyper-parameters from the checkpoint header (seven little-endian int32).
struct ModelConfig {
  int64_t dim = 0;         ///< model width
  int64_t hidden_dim = 0;  ///< SwiGLU inner width
  int64_t n_layers = 0;
  int64_t n_heads = 0;     ///< query heads
  int64_t n_kv_heads = 0;  ///< key/value heads (GQA when fewer than n_heads)
  int64_t vocab_size = 0;  ///< always positive here; the header stores it negated when unshared
  int64_t seq_len = 0;     ///< context length the model was trained for
  bool shared_classifier = true;  ///< true: logits use the token embedding table
  // Set by Model::open for GGUF / Hugging Face models; a llama2.c checkpoint keeps these defaults.
  std::string architecture = "llama2.c";  ///< llama2.c | llama | qwen2
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  RopeLayout rope_layout = RopeLayout::AdjacentPairs;  ///< pairs (2i, 2i+1) or (i, i + D/2)
  /// Sliding-window attention (Mistral): a token at position p attends to positions
  /// p - sliding_window + 1 .. p only, whatever the cache keeps; 0 = no window.
  int64_t sliding_window = 0;

  int64_t head_dim() const { return n_heads > 0 ? dim / n_heads : 0; }
  int64_t kv_dim() const { return n_heads > 0 ? dim * n_kv_heads / n_heads : 0; }

  /// The config a llama2.c header's seven int32 describe (dim, hidden_dim, n_layers, n_heads,
  /// n_kv_heads, vocab_size negated when the classifier is unshared, seq_len); not validated.
  static ModelConfig from_llama2c_header(const int32_t h[7]);

  /// Throws FormatError naming the header field when a value is out of range or the fields
  /// disagree (dim not divisible by n_heads, odd head_dim, n_heads not a multiple of n_kv_heads).
  void validate() const;
  /// Floats stored after the header: every tensor, the two legacy RoPE tables, and wcls if
  /// unshared. Call validate() first (sizes are then known not to overflow).
  int64_t n_floats() const;
  /// The exact checkpoint size in bytes this config implies (28 + 4 * n_floats()).
  int64_t file_bytes() const;
};

/// Pointers into one layer's weights; matrices are row-major [out, in].
struct LayerWeights {
  const float* rms_att = nullptr;  ///< [dim]
  const float* wq = nullptr;       ///< [dim, dim]
  const float* wk = nullptr;       ///< [kv_dim, dim]
  const float* wv = nullptr;       ///< [kv_dim, dim]
  const float* wo = nullptr;       ///< [dim, dim]
  const float* rms_ffn = nullptr;  ///< [dim]
  const float* w1 = nullptr;       ///< [hidden, dim]
  const float* w2 = nullptr;       ///< [dim, hidden]
  const float* w3 = nullptr;       ///< [hidden, dim]
};

/// One layer as the engine reads it: matrices in their stored type, norms and biases in fp32.
struct LayerTensors {
  const float* rms_att = nullptr;           ///< [dim]
  const float* rms_ffn = nullptr;           ///< [dim]
  WeightMatrix wq, wk, wv, wo, w1, w2, w3;  ///< w1 = gate, w3 = up, w2 = down
  const float* bq = nullptr;  ///< [dim] q bias (qwen2), nullptr when the model has none
  const float* bk = nullptr;  ///< [kv_dim]
  const float* bv = nullptr;  ///< [kv_dim]
};

class Model {
 public:
  Model() = default;

  /// Any supported model: a directory is a Hugging Face checkpoint, a file starting with "GGUF"
  /// a GGUF model, anything else a llama2.c checkpoint (load). Refusals as in load() and
  /// ModelWeights::open(); a model whose weights need more bytes than the machine's physical
  /// memory is refused (InvalidArgument naming both). `how` says how a GGUF / Hugging Face
  /// model's files come into memory (veloxquant/mapped_file.hpp); a llama2.c checkpoint is always
  /// read and converted.
  static Model open(const std::string& path, FileLoad how = FileLoad::Map);
  /// Wrap GGUF / Hugging Face weights (kept in their stored type, where the file's bytes are:
  /// the memory map or its copy). FormatError
  /// when the shapes are outside what the engine runs (head_dim != dim / n_heads, no context
  /// length, a rope_freqs.weight of the wrong size).
  static Model from_weights(ModelWeights weights);

  /// Read a llama2.c legacy checkpoint. Missing/unreadable file: IoError. A header field out of
  /// range, a file whose length differs from what the header implies (truncated or padded; the
  /// message names the tensor where the data ends), or a non-finite weight (the message names
  /// the tensor): FormatError.
  static Model load(const std::string& path);
  /// Deterministic random weights for tests and benchmarks (normal, std `scale`; norms near 1).
  static Model random(const ModelConfig& config, uint64_t seed, float scale = 0.1f);
  /// Deterministic random weights held in memory as `type` (F32, F16, BF16, Q8_0 or Q4_K; see
  /// ggml_quantize), for benchmarks at realistic shapes: a Llama model (adjacent-pair RoPE,
  /// untied output unless config.shared_classifier). Each matrix row is drawn (uniform, std
  /// `scale`, from a generator seeded by seed, tensor and row) and quantized straight into the
  /// model's buffer, rows spread over the thread pool: no fp32 copy of a whole tensor is made and
  /// the bytes are the same for any thread count. Norms are fp32 near 1. InvalidArgument for
  /// another type or a width that is not a whole number of the type's blocks.
  static Model random_typed(const ModelConfig& config, GgmlType type, uint64_t seed,
                            float scale = 0.02f);
  /// Write as a llama2.c legacy checkpoint (with the legacy RoPE tables). Throws IoError.
  void save(const std::string& path) const;

  const ModelConfig& config() const { return config_; }
  /// The fp32 views below exist only for llama2.c checkpoints (InvalidArgument otherwise; use
  /// tensors() / embedding_matrix() / output_matrix(), which work for every model).
  const float* token_embedding() const;  ///< [vocab, dim]
  LayerWeights layer(int64_t l) const;
  const float* classifier() const;  ///< [vocab, dim] (the embedding table when shared)
  const float* rms_final() const;   ///< [dim] (every model)

  /// True for a llama2.c checkpoint (load / random), false for GGUF / Hugging Face weights.
  bool is_checkpoint() const { return weights_ == nullptr; }
  /// The GGUF / Hugging Face weights, or nullptr for a llama2.c checkpoint.
  const ModelWeights* weights() const;
  LayerTensors tensors(int64_t l) const;
  WeightMatrix embedding_matrix() const;  ///< [vocab, dim]
  WeightMatrix output_matrix() const;     ///< [vocab, dim] (the embedding when tied)
  /// RoPE angle per position step for pair i of a head (head_dim / 2 values): theta^(-2i/D),
  /// remapped by llama3 rope_scaling (config.json) or divided by rope_freqs.weight (GGUF).
  std::vector<double> rope_frequencies() const;
  /// Bytes of the weights as stored (what inference touches for every token).
  uint64_t weight_bytes() const;

 private:
  struct Converted;  // GGUF / HF: the weights, fp32 copies of norms and biases, per-layer views
  const float* converted_rms_final() const;
  ModelConfig config_;
  AlignedFloats data_;  // every float after the header, in file order (llama2.c only)
  std::shared_ptr<const Converted> weights_;
};

// ------------------------------------------------------------------------------------------------
// Tokenizer

class Tokenizer {
 public:
  static constexpr int32_t kUnk = 0, kBos = 1, kEos = 2;

  Tokenizer() = default;
  /// Read tokenizer.bin: int32 max_token_length, then per piece float32 score, int32 length,
  /// the bytes. With vocab_size > 0 exactly that many pieces are read and the file must end
  /// there; with vocab_size <= 0 pieces are read to the end of the file. IoError / FormatError.
  static Tokenizer load(const std::string& path, int64_t vocab_size = 0);
  /// Build from pieces and scores directly (tests).
  static Tokenizer from_pieces(std::vector<std::string> pieces, std::vector<float> scores);

  int64_t vocab_size() const { return static_cast<int64_t>(pieces_.size()); }
  int64_t max_token_length() const { return max_len_; }
  const std::string& piece(int32_t id) const;
  float score(int32_t id) const;
  /// Id of an exact piece, or -1.
  int32_t find(std::string_view piece) const;
  /// True when pieces 3..258 are the byte pieces "<0x00>".."<0xFF>".
  bool has_byte_fallback() const { return byte_fallback_; }

  /// llama2.c encode: optional BOS, then (for non-empty text) a dummy-prefix space and the text,
  /// each UTF-8 character mapped to its piece or, when absent, to byte pieces (id = byte + 3;
  /// <unk> when the vocabulary has no byte pieces), then repeated merges of the adjacent pair
  /// whose concatenation is a piece with the highest score (ties: leftmost). O(n log n).
  std::vector<int32_t> encode(std::string_view text, bool bos = true, bool eos = false) const;
  /// Text of `token` following `prev`: "<0xNN>" pieces give the raw byte; right after BOS one
  /// leading space (the dummy prefix) is dropped; BOS and EOS give no text.
  std::string decode_piece(int32_t prev, int32_t token) const;
  /// decode_piece over the sequence (prev of the first token is BOS when it is not BOS itself
  /// and `after_bos` is true). decode(encode(t)) == t for text the vocabulary covers.
  std::string decode(const std::vector<int32_t>& tokens, bool after_bos = true) const;

 private:
  void index();
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<int32_t> sorted_;  // piece ids sorted by piece bytes, for find()
  int64_t max_len_ = 0;
  bool byte_fallback_ = false;
};

// ------------------------------------------------------------------------------------------------
// Engine

struct EngineOptions {
  uint64_t seed = 0;  ///< passed to build_caches (per-layer seeds derived from it)
  /// Decode only. An eviction policy may drop the token it was just given (it judges it not
  /// worth keeping for later tokens). With strict_view = false (default) that token still
  /// attends to its own key/value at this step, as a serving stack does: they are at hand and
  /// cost no cache memory. With true, attention covers exactly what the cache holds.
  bool strict_view = false;
};

/// fp32 forward pass of a Model, one VeloxQuant KVCache per layer (built by build_caches).
///
/// Decode (`step`): for each layer the token's key/value [1, n_kv_heads, 1, head_dim] and its
/// RoPE'd queries [1, n_heads, 1, head_dim] go to cache->update(k, v, &q); the token then attends
/// over cache->keys()/values() (whatever is kept, at the kept tokens' true positions), plus its own
/// key/value if the cache dropped them and strict_view is off.
/// Prefill (`prefill`): the chunk attends causally and exactly over (what the cache held before
/// the chunk) + (the chunk itself); then the whole chunk goes to the cache in one update call.
/// Caches with wants_pre_rope_keys() get un-rotated keys; the engine rotates what it reads back
/// by each kept token's position. The Model must outlive the Engine.
class Engine {
 public:
  Engine(const Model& model, const CacheConfig& cache, const EngineOptions& opt = {});
  Engine(const Model& model, const std::string& cache_spec, const EngineOptions& opt = {});
  /// Caches from a factory instead of the registry (tests, custom caches): make_layer_cache(l)
  /// builds layer l's cache; it is called again by reset(). cache_config() is layer 0's config.
  using CacheFactory = std::function<std::unique_ptr<KVCache>(int64_t layer)>;
  Engine(const Model& model, CacheFactory make_layer_cache, const EngineOptions& opt = {});
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  const Model& model() const;
  const CacheConfig& cache_config() const;
  const EngineOptions& options() const;
  /// Fresh caches (same config and seed) and position 0.
  void reset();
  /// Position the next token will take (= tokens processed so far).
  int64_t position() const;

  /// Process `token` at position(); returns its logits [vocab], valid until the next call.
  /// Throws InvalidArgument for a token outside [0, vocab) or when position() == seq_len.
  const float* step(int32_t token);
  /// Process `tokens` at positions position() ... position() + n - 1. Returns the logits of
  /// every position, [n, vocab] row-major (all_logits) or only the last row [vocab].
  const std::vector<float>& prefill(const std::vector<int32_t>& tokens, bool all_logits = true);

  int64_t n_layers() const;
  const KVCache& cache(int64_t layer) const;
  /// Sum over layers of the byte fields (kept, its parts, stored, full_seq; tokens_* from layer 0).
  CacheStats stats() const;

 private:
  struct Impl;
  void init(const Model& model, const EngineOptions& opt);
  std::unique_ptr<Impl> impl_;
};

struct GenerateOptions {
  int64_t steps = 256;       ///< most new tokens (also capped by the context length)
  float temperature = 0.0f;  ///< 0 = greedy (argmax, ties to the lowest id)
  uint64_t seed = 0;         ///< sampling seed when temperature > 0
  bool stop_at_bos = true;   ///< stop when the model emits a stop token (llama2.c behaviour)
  /// The stop tokens: empty = llama2.c's BOS and EOS (1 and 2); a GGUF / HF model's CLI passes
  /// its tokenizer's BOS and EOS.
  std::vector<int32_t> stop_tokens;
};

/// Prefill `prompt` (which should start with BOS), then sample up to opt.steps tokens one at a
/// time. Returns the new tokens (the stopping BOS/EOS is not included). on_token, when given, is
/// called with (previous token, new token) as each token is produced.
std::vector<int32_t> generate(Engine& engine, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opt,
                              const std::function<void(int32_t, int32_t)>& on_token = {});

/// Index of the largest logit (ties to the lowest index).
int32_t argmax(const float* logits, int64_t n);

// ------------------------------------------------------------------------------------------------
// Where the real model files are

/// A file of ../shared/models/README.md and where to get it.
struct ModelFileInfo {
  std::string name;    ///< e.g. "stories260K.bin"
  std::string what;    ///< one line
  std::string source;  ///< repository @ commit : path, and a download URL
};
const std::vector<ModelFileInfo>& known_model_files();

/// Directories searched for model files, in order: $VQ_MODELS_DIR (when set), then
/// <root>/../shared/models for each candidate project root (the current directory, the two
/// directories above the running executable, the source tree this library was built from).
std::vector<std::string> model_search_dirs();
/// The first existing `name` in model_search_dirs(), or "" when absent.
std::string locate_model_file(const std::string& name);
/// `given` when non-empty (the loader then reports a missing file); otherwise
/// locate_model_file(name), throwing IoError that lists the searched directories and how to
/// download the file when it is nowhere.
std::string find_model_file(const std::string& name, const std::string& given = "");
/// The tokenizer file that goes with a vocabulary size (512 -> tok512.bin, 105 -> tok105.bin),
/// or "" when none is known.
std::string default_tokenizer_for(int64_t vocab_size);

}  // namespace vq

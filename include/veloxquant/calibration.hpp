// KVTC calibration: a per-model PCA basis and a measured distortion table, fitted once on
// calibration text and shared by every cache of that model (kvtc:basis=<path>), stored as a
// `.vqcal` file.
//
// For each (layer, KV head or all heads pooled, keys/values) stream a calibration holds:
//   mean[D], an orthonormal basis [D][D] (rows = components by descending variance, each row's
//   largest-magnitude entry positive), variances[D], and, per component j and bit width b = 0..8,
//   the mean squared latent error per token that quantizing component j's calibration latents at b
//   bits actually produced, with two quantizers:
//     dist_chunk  today's per-chunk min/max quantizer over chunks of chunk_tokens latents
//     dist_range  a fixed range [range_lo, range_hi] per (j, b), the MSE-minimizing clip range
//                 chosen at calibration from a small grid (quant=calibrated)
//   b = 0 means "dropped": the error is the latent's mean square.
// The layout of the file is in docs/format.md ("Calibration files"); the XXH64 checksum of the
// whole file before it is the calibration's stable 64-bit id.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "veloxquant/model.hpp"

namespace vq {

/// Whether keys were captured after RoPE (as attention uses them) or before it.
enum class RopeMode : uint8_t { Post = 0, Pre = 1 };
const char* rope_mode_name(RopeMode r);

/// Largest head_dim and chunk_tokens a .vqcal file holds.
constexpr int64_t kCalibrationMaxHeadDim = 1024;
constexpr int64_t kCalibrationMaxChunk = int64_t{1} << 20;

/// Width entries per component in the distortion tables: b = 0..8.
constexpr int kCalibWidths = 9;

/// One stream's calibration.
struct CalibrationEntry {
  std::vector<float> mean;         ///< [D]
  std::vector<float> basis;        ///< [D, D] row-major, row j = component j
  std::vector<double> variances;   ///< [D] descending, >= 0
  std::vector<double> dist_chunk;  ///< [D, 9] per-chunk min/max quantizer
  std::vector<double> dist_range;  ///< [D, 9] calibrated fixed-range quantizer
  std::vector<float> range_lo;     ///< [D, 9] (b = 0 entries are 0, unused)
  std::vector<float> range_hi;     ///< [D, 9] range_hi >= range_lo for b >= 1 (equal: constant)
  bool operator==(const CalibrationEntry& o) const = default;
};

struct Calibration {
  int64_t n_layers = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  RopeMode rope = RopeMode::Post;
  bool shared_heads = false;  ///< one entry per (layer, K/V) for all heads
  int64_t tokens = 0;         ///< calibration tokens (rows per head)
  int64_t chunk_tokens = 0;   ///< chunk size dist_chunk was measured with
  /// Identity of the model the calibration was measured on: model_digest() of its checkpoint
  /// (0 = not recorded: files of format version 1). Users of a calibration compare it with the
  /// model they run (the CLI refuses a mismatch unless told otherwise).
  uint64_t model_id = 0;
  /// The .vqcal format version serialize() writes: 2 (the default), or 1 (no model_id field; only
  /// with model_id == 0), which parse() sets for a version-1 file so that it re-serializes to the
  /// same bytes.
  int format_version = 2;
  /// (layer * groups() + group) * 2 + kv, groups() = shared_heads ? 1 : n_kv_heads.
  std::vector<CalibrationEntry> entries;

  int64_t groups() const { return shared_heads ? 1 : n_kv_heads; }
  /// The entry used by (layer, head, kv); throws InvalidArgument when out of range.
  const CalibrationEntry& entry(int64_t layer, int64_t head, int kv) const;
  /// Index into entries of (layer, head, kv) (head is ignored when shared_heads).
  int64_t entry_index(int64_t layer, int64_t head, int kv) const;

  /// The file bytes (magic .. checksum). Throws InvalidArgument when the fields are inconsistent.
  std::vector<uint8_t> serialize() const;
  /// XXH64 of serialize() minus its last 8 bytes: the stable id (= the stored checksum).
  uint64_t id() const;
  /// Parse file bytes; every field is checked, sizes before any allocation. Throws FormatError
  /// naming the field and its limit.
  static Calibration parse(const uint8_t* data, size_t size);
  void save(const std::string& path) const;          ///< IoError
  static Calibration load(const std::string& path);  ///< IoError / FormatError
  /// Set by parse(): the checksum it verified, returned by id() without re-serializing.
  /// 0 = compute. Code that edits a parsed calibration must reset it to 0.
  uint64_t verified_id = 0;
  /// Field equality (verified_id is not compared).
  bool operator==(const Calibration& o) const;
};

/// The loaded calibration at `path`, shared: a file is read once per process and again only when
/// its size or modification time changed. Thread-safe.
std::shared_ptr<const Calibration> load_calibration_shared(const std::string& path);

/// The identity a calibration records for a model: XXH64 (seed 0) of its model file's bytes (a
/// llama2.c checkpoint or a .gguf, read through a memory map); for a Hugging Face directory, XXH64
/// of the digests of config.json and every *.safetensors in name order. Throws IoError when a
/// file cannot be read.
uint64_t model_digest(const std::string& checkpoint_path);

/// Fewest calibration tokens (rows per stream) calibrate_model accepts: a basis of head_dim
/// components needs at least head_dim rows, and the per-chunk table one whole chunk.
int64_t min_calibration_tokens(int64_t head_dim, int64_t chunk_tokens);

/// Fit one stream's entry on rows X [n, D] (n >= 1): mean, PCA, both distortion tables and the
/// calibrated ranges. chunk_tokens >= 1.
CalibrationEntry fit_calibration_entry(const float* X, int64_t n, int64_t D, int64_t chunk_tokens);

/// Grid of clip factors a of the calibrated range [a * min, a * max] of a component's latents.
const std::vector<double>& calibration_clip_grid();

struct CalibrateOptions {
  RopeMode rope = RopeMode::Post;
  bool shared_heads = false;
  int64_t chunk_tokens = 128;
  /// Called after each window with (done, total).
  std::function<void(int64_t, int64_t)> progress;
};

/// Run `model` over `windows` (each BOS + text, at most the context; see eval::make_windows) with
/// an uncompressed capture cache, collect every layer's keys (post- or pre-RoPE) and values per
/// KV head, and fit every entry.
Calibration calibrate_model(const Model& model, const std::vector<std::vector<int32_t>>& windows,
                            const CalibrateOptions& opt);

}  // namespace vq

// Hugging Face safetensors files (single file or sharded through model.safetensors.index.json),
// memory-mapped or read into memory (FileLoad), dtypes F32 / F16 / BF16.
//
// Layout: uint64 little-endian N, then N bytes of JSON {"name": {"dtype", "shape", "data_offsets":
// [begin, end]}, ..., "__metadata__": {string: string}}, then the data; offsets count from the
// first byte after the JSON. Checked before use: N against the file size (and a 100 MB cap), the
// JSON itself, every dtype (others are refused by name), shape entries (>= 0, product < 2^62),
// end - begin == numel * dtype size, end within the data, no two tensors overlapping, unique
// names across shards, shard file names (plain names in the same directory).
//
// Shapes are in PyTorch order (last axis contiguous), unlike GGUF.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "veloxquant/mapped_file.hpp"

namespace vq {

enum class StDtype { F32, F16, BF16 };
const char* st_dtype_name(StDtype d);
int64_t st_dtype_size(StDtype d);

struct SafetensorsTensor {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  ///< from the start of the data region
  uint64_t bytes = 0;
  int64_t numel() const;
};

/// One .safetensors file.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path, FileLoad how = FileLoad::Map);
  static SafetensorsFile parse(std::shared_ptr<const MappedFile> file);

  const std::string& path() const { return file_->path(); }
  uint64_t data_offset() const { return data_offset_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsTensor* find_tensor(const std::string& name) const;
  const uint8_t* tensor_data(const SafetensorsTensor& t) const;
  /// The tensor widened to fp32.
  std::vector<float> to_float(const SafetensorsTensor& t) const;

 private:
  std::shared_ptr<const MappedFile> file_;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

/// A whole checkpoint: one file, or every shard named by an index.
class SafetensorsModel {
 public:
  /// `path`: a .safetensors file, a model.safetensors.index.json, or a directory holding
  /// model.safetensors or model.safetensors.index.json. `how` applies to every shard (the index
  /// itself is always mapped).
  static SafetensorsModel open(const std::string& path, FileLoad how = FileLoad::Map);
  /// The .safetensors files open() would read for `path` (the one file, or each shard the index
  /// names, once), the index checked as open() checks it; nothing else is read.
  static std::vector<std::string> files(const std::string& path);

  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  /// Every tensor name, sorted.
  std::vector<std::string> names() const;
  /// nullptr when absent; `shard` receives the file holding it.
  const SafetensorsTensor* find_tensor(const std::string& name,
                                       const SafetensorsFile** shard = nullptr) const;
  /// Required: FormatError naming the tensor when absent.
  const SafetensorsTensor& tensor(const std::string& name,
                                  const SafetensorsFile** shard = nullptr) const;
  std::vector<float> to_float(const std::string& name) const;
  uint64_t total_bytes() const;

 private:
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, std::pair<size_t, size_t>> where_;  // name -> (shard, tensor index)
};

}  // namespace vq

// `veloxquant info` for model files (.gguf, Hugging Face directory, .safetensors).
#pragma once

#include <cstdint>
#include <string>

#include "cli_util.hpp"

namespace vqcli {
/// True for a path `info` treats as a model: a directory, *.gguf, *.safetensors(.index.json).
bool is_model_file(const std::string& path);
/// True when `path` is a llama2.c checkpoint: its 28-byte header is a valid config whose weights
/// take exactly the file's size (a tokenizer.bin never does).
bool is_llama2c_checkpoint(const std::string& path);
/// The vocabulary size in a llama2.c checkpoint's header.
int64_t checkpoint_vocab(const std::string& path);
/// Print (and with json_path, write as JSON) the configuration in a llama2.c checkpoint's header.
void print_llama2c_info(const std::string& path, const std::string& json_path);
/// Print (and with json_path, write as JSON) what the model file holds.
void print_model_info(const std::string& path, const std::string& json_path, bool summary);
}  // namespace vqcli

// `veloxquant info` for model files (.gguf, Hugging Face directory, .safetensors).
#pragma once

#include <string>

#include "cli_util.hpp"

namespace vqcli {
/// True for a path `info` treats as a model: a directory, *.gguf, *.safetensors(.index.json).
bool is_model_file(const std::string& path);
/// Print (and with json_path, write as JSON) what the model file holds.
void print_model_info(const std::string& path, const std::string& json_path, bool summary);
}  // namespace vqcli

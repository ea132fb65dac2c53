#pragma once

#include <memory>
#include <string>

#include "veloxquant/tokenizers.hpp"

namespace vq::tok {
/// A Hugging Face tokenizer.json (see hf_tokenizer.cpp for what is read and refused).
std::unique_ptr<TextTokenizer> load_hf_tokenizer_json(const std::string& path);
/// A SentencePiece tokenizer.model through libsentencepiece.
std::unique_ptr<TextTokenizer> load_sentencepiece_model(const std::string& path);
/// A llama2.c tokenizer.bin through vq::Tokenizer.
std::unique_ptr<TextTokenizer> load_llama2c_tokenizer(const std::string& path);
}  // namespace vq::tok

// TextModel (a model with its tokenizer), TextStream and generate_text: see
// include/veloxquant/text_model.hpp.
#include "veloxquant/text_model.hpp"

#include <utility>

#include "veloxquant/errors.hpp"

namespace vq {

TextModel TextModel::open(const std::string& model_path, const std::string& tokenizer_path,
                          bool need_tokenizer, FileLoad how) {
  TextModel m;
  m.model_path = model_path;
  m.model = Model::open(model_path, how);
  const int64_t V = m.model.config().vocab_size;
  std::string tp = tokenizer_path;
  if (tp.empty() && m.model.is_checkpoint()) {
    const std::string name = default_tokenizer_for(V);
    VQ_CHECK(!name.empty() || !need_tokenizer, InvalidArgument,
             "no default tokenizer is known for vocab_size = ", V, " (model '", model_path,
             "'); pass a tokenizer path");
    tp = name.empty() ? std::string() : locate_model_file(name);
    if (tp.empty() && need_tokenizer) tp = find_model_file(name);  // throws, naming it
  } else if (tp.empty()) {
    tp = model_path;  // the vocabulary inside the .gguf / directory
  }
  if (tp.empty()) return m;
  try {
    m.tok = load_tokenizer(tp);
  } catch (const Error&) {
    if (need_tokenizer || !tokenizer_path.empty()) throw;
    return m;  // pre-tokenized input: a model without a vocabulary is fine
  }
  m.tokenizer_path = tp;
  const int64_t tv = m.tok->vocab_size();
  if (m.model.is_checkpoint())
    VQ_CHECK(tv == V, InvalidArgument, "tokenizer '", tp, "' holds ", tv,
             " pieces but the model's vocabulary has ", V, " (model '", model_path, "')");
  else
    VQ_CHECK(tv <= V, InvalidArgument, "tokenizer '", tp, "' has ", tv, " tokens, more than the ",
             V, " rows of model '", model_path, "'");
  return m;
}

int32_t TextModel::bos() const {
  if (!tok) {
    VQ_CHECK(model.is_checkpoint(), InvalidArgument, "model '", model_path,
             "' has no tokenizer, so its BOS token is unknown: pass a tokenizer");
    return Tokenizer::kBos;
  }
  const int32_t b = tok->bos_id() >= 0 ? tok->bos_id() : tok->eos_id();
  VQ_CHECK(b >= 0 && b < model.config().vocab_size, InvalidArgument, "tokenizer '", tokenizer_path,
           "' defines no BOS or EOS token inside the model's vocabulary [0, ",
           model.config().vocab_size, ")");
  return b;
}

std::vector<int32_t> TextModel::stop_tokens() const {
  if (!tok) return {Tokenizer::kBos, Tokenizer::kEos};
  std::vector<int32_t> s;
  for (int32_t t : {tok->bos_id(), tok->eos_id()})
    if (t >= 0) s.push_back(t);
  return s;
}

const TextTokenizer& TextModel::tokenizer() const {
  VQ_CHECK(tok != nullptr, InvalidArgument, "model '", model_path,
           "' was opened without a tokenizer; pass a tokenizer path to encode text");
  return *tok;
}

std::vector<int32_t> TextModel::encode_prompt(const std::string& text) const {
  const TextTokenizer& t = tokenizer();
  std::vector<int32_t> prompt = t.encode(text, t.add_bos_default(), false);
  if (prompt.empty()) prompt.push_back(bos());  // a vocabulary that adds no BOS itself
  VQ_CHECK(static_cast<int64_t>(prompt.size()) <= model.config().seq_len, InvalidArgument,
           "the prompt encodes to ", prompt.size(), " tokens, more than the context length ",
           model.config().seq_len);
  return prompt;
}

void TextModel::check_ids(const std::vector<int32_t>& ids, const std::string& what) const {
  const int64_t V = model.config().vocab_size;
  for (size_t i = 0; i < ids.size(); ++i)
    VQ_CHECK(ids[i] >= 0 && ids[i] < V, InvalidArgument, what, ": id ", ids[i], " at index ", i,
             " is outside the vocabulary [0, ", V, ")");
}

std::string TextStream::push(const std::vector<int32_t>& tokens) {
  if (!tok_) {
    std::string s;
    for (int32_t t : tokens) s += std::to_string(t) + " ";
    text_ += s;
    return s;
  }
  const bool first = ids_.empty();
  ids_.insert(ids_.end(), tokens.begin(), tokens.end());
  if (first && !ids_.empty() && ids_.front() == tok_->bos_id()) ids_.erase(ids_.begin());
  std::string all = tok_->decode(ids_);
  std::string piece = all.size() > decoded_.size() ? all.substr(decoded_.size()) : std::string();
  decoded_ = std::move(all);
  if (piece.size() == 1) {
    const unsigned char c = static_cast<unsigned char>(piece[0]);
    if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') piece.clear();
  }
  text_ += piece;
  return piece;
}

GeneratedText generate_text(const TextModel& m, const std::vector<int32_t>& prompt,
                            const CacheConfig& cache, const EngineOptions& engine_options,
                            GenerateOptions opt,
                            const std::function<void(const std::string&)>& on_text) {
  VQ_CHECK(!prompt.empty(), InvalidArgument, "the prompt holds no token (start it with the BOS, ",
           m.bos(), ")");
  VQ_CHECK(static_cast<int64_t>(prompt.size()) <= m.model.config().seq_len, InvalidArgument,
           "the prompt holds ", prompt.size(), " tokens, more than the context length ",
           m.model.config().seq_len);
  m.check_ids(prompt, "prompt");
  if (opt.stop_tokens.empty()) opt.stop_tokens = m.stop_tokens();
  Engine engine(m.model, cache, engine_options);
  GeneratedText g;
  g.prompt = prompt;
  TextStream stream(m.tok.get());
  auto emit = [&](const std::vector<int32_t>& ids) {
    const std::string s = stream.push(ids);
    if (on_text && !s.empty()) on_text(s);
  };
  emit(prompt);
  g.tokens = generate(engine, prompt, opt, [&](int32_t, int32_t next) { emit({next}); });
  g.text = stream.text();
  g.stats = engine.stats();
  return g;
}

}  // namespace vq

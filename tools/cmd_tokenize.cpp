// `veloxquant tokenize`: encode a text with the tokenizer a model file carries and print the ids
// on one line, separated by spaces.
#include <cstring>
#include <memory>

#include "cli_util.hpp"
#include "model_cli.hpp"
#include "model_info.hpp"
#include "veloxquant/tokenizers.hpp"

namespace vqcli {
void register_tokenize(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "tokenize",
      "Print the token ids of a text under a model's own tokenizer (a .gguf, a Hugging Face "
      "directory, tokenizer.model / tokenizer.json / tokenizer.bin, or a llama2.c .bin with "
      "--tokenizer)");
  struct Opts {
    std::string model, tokenizer, text_file, text_string, json, npy;
    bool has_string = false, no_bos = false, parse_special = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "model or tokenizer file / directory")->required();
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer file (overrides the one in --model)");
  auto* tf = cmd->add_option("--text", o->text_file, "file holding the text");
  auto* ts = cmd->add_option("--text-string", o->text_string, "the text itself");
  tf->excludes(ts);
  ts->excludes(tf);
  cmd->add_flag("--no-bos", o->no_bos, "do not prepend BOS");
  cmd->add_flag("--parse-special", o->parse_special,
                "match control tokens written in the text (e.g. <s>) as those tokens");
  cmd->add_option("--json", o->json,
                  "also write {tokenizer, count, ids} as JSON ('-' = stdout only)");
  cmd->add_option("--npy", o->npy,
                  "also write the ids as a 1-D int32 .npy (what --text-ids of the model "
                  "commands reads)");
  cmd->callback([o, ts, &g] {
    check_io_paths({{"--model", o->model}, {"--tokenizer", o->tokenizer}, {"--text", o->text_file}},
                   {{"--json", o->json}, {"--npy", o->npy}});
    const bool have_string = ts->count() > 0;
    VQ_CHECK(!o->text_file.empty() || have_string, vq::InvalidArgument,
             "tokenize needs --text FILE or --text-string S");
    std::string path = o->tokenizer.empty() ? o->model : o->tokenizer;
    if (o->tokenizer.empty() && is_llama2c_checkpoint(path)) {
      // A llama2.c checkpoint holds no tokenizer: use the one known for its vocabulary, or ask.
      path = resolve_tokenizer("", checkpoint_vocab(path));
    }
    std::unique_ptr<vq::TextTokenizer> tok = vq::load_tokenizer(path);
    if (!o->tokenizer.empty() && !o->model.empty() && is_llama2c_checkpoint(o->model)) {
      // the ids must be the model's: a tokenizer of another vocabulary gives ids it cannot read
      const int64_t V = checkpoint_vocab(o->model);
      VQ_CHECK(tok->vocab_size() == V, vq::InvalidArgument, "tokenizer '", o->tokenizer, "' holds ",
               tok->vocab_size(), " pieces but the model's vocabulary has ", V, " (model '",
               o->model, "')");
    }
    const std::string text = have_string ? o->text_string : read_text_file(o->text_file);
    const bool bos = !o->no_bos && tok->add_bos_default();
    const std::vector<int32_t> ids = tok->encode(text, bos, o->parse_special);
    if (g.verbosity >= 2) std::fprintf(stderr, "tokenizer: %s\n", tok->description().c_str());
    if (o->json != "-") {
      std::string line;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) line += ' ';
        line += std::to_string(ids[i]);
      }
      std::printf("%s\n", line.c_str());
    }
    if (!o->npy.empty()) {
      vq::NpyArray a;
      a.dtype = vq::NpyDtype::Int32;
      a.shape = {static_cast<int64_t>(ids.size())};
      a.bytes.resize(ids.size() * sizeof(int32_t));
      if (!ids.empty()) std::memcpy(a.bytes.data(), ids.data(), a.bytes.size());
      vq::write_npy(o->npy, a);
    }
    if (!o->json.empty())
      write_json(o->json, nlohmann::json{{"tokenizer", tok->description()},
                                         {"bos", tok->bos_id()},
                                         {"eos", tok->eos_id()},
                                         {"vocab_size", tok->vocab_size()},
                                         {"count", ids.size()},
                                         {"ids", ids}});
  });
}

}  // namespace vqcli

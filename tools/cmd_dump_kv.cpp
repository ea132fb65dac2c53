// `veloxquant dump-kv`: run a model (llama2.c .bin, .gguf, Hugging Face directory) over text with
// the `full` cache and write every layer's keys and values as one .npy [L, 2, H_kv, S, D] (keys
// after RoPE, as the cache holds them). Real KV data for `compress`, `evict` and for other people's
// implementations.
#include "cli_util.hpp"
#include "model_cli.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/npy.hpp"

namespace vqcli {

void register_dump_kv(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "dump-kv",
      "Run a model over text and write its KV cache as .npy [L, 2, H_kv, S, D] (K then V)");
  struct Opts {
    std::string load = "map";
    std::string model, tokenizer, text, prompt, text_ids, out, dtype = "float32", json;
    int64_t tokens = 256, skip = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, kModelHelp);
  add_load_option(cmd, o->load);
  cmd->add_option("--tokenizer", o->tokenizer, kTokenizerHelp);
  auto* to = cmd->add_option("--text", o->text, "text file to read (default: tinystories-val.txt)");
  auto* po = cmd->add_option("--prompt", o->prompt, "literal text instead of --text");
  cmd->add_option("--text-ids", o->text_ids,
                  "token ids instead of text: a 1-D .npy of int32 ids, run as given (BOS "
                  "included by you)")
      ->excludes(to)
      ->excludes(po);
  cmd->add_option("--skip", o->skip, "characters of the text file to skip first")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--tokens", o->tokens, "tokens to run (capped by the context length)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--dtype", o->dtype, "dtype of the .npy")
      ->check(CLI::IsMember({"float32", "float16"}));
  cmd->add_option("--out,-o", o->out, "output .npy ('-' = stdout)")->required();
  cmd->add_option("--json", o->json, "write a summary as JSON ('-' = stdout)");
  add_threads_option(cmd);
  cmd->callback([o, po, &g] {
    VQ_CHECK(po->count() == 0 || !o->prompt.empty(), vq::InvalidArgument,
             "--prompt is empty; give the text to run, or leave --prompt out to read --text");
    check_io_paths({{"--model", o->model},
                    {"--tokenizer", o->tokenizer},
                    {"--text", o->text},
                    {"--text-ids", o->text_ids}},
                   {{"--out", o->out}, {"--json", o->json}});
    const LoadedModel lm = load_model(o->model, o->tokenizer, o->text_ids.empty(), o->load);
    const vq::Model& model = lm.model;
    const vq::ModelConfig& mc = model.config();
    const int64_t want = std::min(o->tokens, mc.seq_len);
    std::vector<int32_t> ids;
    std::string text = o->prompt;
    if (!o->text_ids.empty()) {
      ids = read_text_ids(o->text_ids, mc.vocab_size);
    } else if (text.empty()) {
      text = read_text_file(o->text.empty() ? vq::find_model_file(kDefaultText) : o->text);
      VQ_CHECK(static_cast<size_t>(o->skip) < text.size(), vq::InvalidArgument, "--skip ", o->skip,
               " is past the end of the text (", text.size(), " characters)");
      text = text.substr(static_cast<size_t>(o->skip));
    }
    // Encode a prefix of the text long enough for `want` tokens (every token is >= 1 byte).
    if (ids.empty())
      ids = lm.tok->encode(std::string_view(text).substr(0, static_cast<size_t>(want) * 8),
                           lm.tok->add_bos_default(), false);
    if (static_cast<int64_t>(ids.size()) > want) ids.resize(static_cast<size_t>(want));
    const int64_t S = static_cast<int64_t>(ids.size());

    vq::Engine engine(model, "full");
    engine.prefill(ids, false);
    const int64_t L = engine.n_layers(), H = mc.n_kv_heads, D = mc.head_dim();
    std::vector<float> kv(static_cast<size_t>(L * 2 * H * S * D));
    for (int64_t l = 0; l < L; ++l) {
      const vq::FetchResult r = engine.cache(l).fetch();
      VQ_CHECK(r.n_kept == S && r.keys.H() == H && r.keys.D() == D, vq::Error, "dump-kv: layer ", l,
               " holds ", r.n_kept, " tokens of [H = ", r.keys.H(), ", D = ", r.keys.D(),
               "], expected ", S, " of [", H, ", ", D, "]");
      const size_t block = static_cast<size_t>(H * S * D);
      std::copy(r.keys.data(), r.keys.data() + block, kv.begin() + (2 * l) * block);
      std::copy(r.values.data(), r.values.data() + block, kv.begin() + (2 * l + 1) * block);
    }
    const vq::NpyDtype t = o->dtype == "float16" ? vq::NpyDtype::Float16 : vq::NpyDtype::Float32;
    write_output(o->out, vq::encode_npy(vq::npy_from_float(kv.data(), {L, 2, H, S, D}, t)));
    if (g.verbosity > 0 && o->json != "-")
      std::fprintf(o->out == "-" ? stderr : stdout,
                   "%lld tokens through %lld layers -> %s [%lld, 2, %lld, %lld, %lld] %s\n",
                   static_cast<long long>(S), static_cast<long long>(L), o->out.c_str(),
                   static_cast<long long>(L), static_cast<long long>(H), static_cast<long long>(S),
                   static_cast<long long>(D), o->dtype.c_str());
    if (!o->json.empty())
      write_json(
          o->json,
          {{"output", o->out}, {"shape", {L, 2, H, S, D}}, {"dtype", o->dtype}, {"tokens", S}});
  });
}

}  // namespace vqcli

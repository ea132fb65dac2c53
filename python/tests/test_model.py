"""veloxquant.Model: open a .gguf / llama2.c .bin, tokenize, generate and evaluate, with the same
results as the CLI (`veloxquant tokenize / generate / eval`) on the same inputs."""
import json
import subprocess

import pytest

import veloxquant as vq

MODELS = ["stories260K.bin", "stories260K.gguf"]
PROMPT = "Once upon a time, there was a little dog"


def run_cli(cli, *args):
    r = subprocess.run([cli, "-q", *args], capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


@pytest.mark.parametrize("name", MODELS)
def test_open_config_and_tokenize_match_cli(name, model_file, cli):
    path = model_file(name)
    m = vq.Model(path)
    c = m.config
    assert c["vocab_size"] == 512 and c["n_layers"] == 5 and c["context_length"] == 512
    assert c["bos_id"] == 1 and c["eos_id"] == 2
    ids = m.tokenize(PROMPT)
    out = run_cli(cli, "tokenize", "--model", path, "--text-string", PROMPT)
    assert ids == [int(t) for t in out.split()]
    assert ids[0] == 1 and m.tokenize(PROMPT, add_bos=False) == ids[1:]
    assert m.detokenize(ids) == PROMPT  # no dummy-prefix space, BOS gives no text


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("method", ["full", "snapkv:budget=64+q8_0:block=8", "h2o:budget=32"])
def test_generate_equals_cli(name, method, model_file, cli):
    path = model_file(name)
    m = vq.Model(path)
    text, tokens = m.generate(PROMPT, method=method, steps=80, return_tokens=True)
    out = run_cli(cli, "generate", "--model", path, "--prompt", PROMPT, "--method", method,
                  "--steps", "80")
    assert out.decode("utf-8", "replace") == text + "\n"
    assert text.startswith(PROMPT) and len(text) > len(PROMPT) + 40
    assert 0 < len(tokens) <= 80
    assert m.generate(PROMPT, method=method, steps=80) == text


def test_generate_same_text_from_bin_and_gguf(model_file):
    a = vq.Model(model_file("stories260K.bin")).generate(PROMPT, steps=100)
    b = vq.Model(model_file("stories260K.gguf")).generate(PROMPT, steps=100)
    assert a == b


def test_load_copy_gives_the_mapped_models_text(model_file):
    path = model_file("stories260K.gguf")
    want = vq.Model(path).generate(PROMPT, method="h2o:budget=32", steps=60)
    assert vq.Model(path, load="copy").generate(PROMPT, method="h2o:budget=32", steps=60) == want
    assert vq.Model(path, load="map").generate(PROMPT, method="h2o:budget=32", steps=60) == want
    assert vq.Model(path, load=None).generate(PROMPT, method="h2o:budget=32", steps=60) == want
    with pytest.raises(ValueError, match="'mmap' is not one of: map, copy"):
        vq.Model(path, load="mmap")


def test_generate_from_ids_and_from_bos(model_file):
    m = vq.Model(model_file("stories260K.gguf"))
    assert m.generate(m.tokenize(PROMPT), steps=30) == m.generate(PROMPT, steps=30)
    assert m.generate(steps=20).startswith("Once upon a time")
    assert m.generate(PROMPT, steps=0) == PROMPT


@pytest.mark.parametrize("name", MODELS)
def test_evaluate_equals_cli_eval(name, model_file, cli, tmp_path):
    path = model_file(name)
    with open(model_file("tinystories-val.txt"), encoding="utf-8") as f:
        text = f.read()[:8000]
    methods = ["snapkv:budget=64+q8_0:block=8", "h2o:budget=64", "q8_0:block=8"]
    m = vq.Model(path)
    got = m.evaluate(text=text, methods=methods, max_tokens=800, skip_tokens=10)
    tf = tmp_path / "text.txt"
    tf.write_text(text, encoding="utf-8")
    want = json.loads(run_cli(cli, "eval", "--model", path, "--text", str(tf), "--methods",
                              ";".join(methods), "--max-tokens", "800", "--skip-tokens", "10",
                              "--json", "-"))
    assert got["windows"] == want["windows"] == 2
    assert got["predicted_tokens"] == want["predicted_tokens"] == 800
    for g, w in zip([got["reference"]] + got["methods"], [want["reference"]] + want["methods"]):
        assert g["spec"] == w["spec"]
        for k in ("perplexity", "nll_sum", "kl_mean", "kl_max", "top1_agreement",
                  "bytes_per_token", "compression_ratio"):
            assert g[k] == w[k], (g["spec"], k)
    assert got["reference"]["kl_mean"] == 0
    assert all(r["kl_mean"] > 0 for r in got["methods"])
    # ids give the same as the text they encode to
    ids = m.tokenize(text, add_bos=False)
    by_ids = m.evaluate(ids=ids, methods=methods[:1], max_tokens=800, skip_tokens=10)
    assert by_ids["methods"][0]["kl_mean"] == got["methods"][0]["kl_mean"]


def test_errors_are_exceptions(model_file, tmp_path):
    with pytest.raises(ValueError, match="nonexistent"):
        vq.Model(str(tmp_path / "nonexistent.gguf"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 5)
    with pytest.raises(ValueError):
        vq.Model(str(bad))
    m = vq.Model(model_file("stories260K.bin"))
    with pytest.raises(ValueError, match="budget"):
        m.generate("a", method="h2o:budget=0", steps=5)
    with pytest.raises(ValueError, match="nosuchmethod"):
        m.evaluate(text="Once upon a time", methods="nosuchmethod")
    with pytest.raises(ValueError, match="512"):
        m.evaluate(ids=[5, 512])
    with pytest.raises(ValueError, match="exactly one"):
        m.evaluate()
    with pytest.raises(ValueError, match="steps"):
        m.generate("a", steps=-1)
    with pytest.raises(ValueError, match="105"):
        vq.Model(model_file("stories260K.bin"), tokenizer=model_file("tok105.bin"))


def test_one_model_from_several_threads(model_file):
    import threading
    m = vq.Model(model_file("stories260K.gguf"))
    prompts = ["Once upon a time", "The cat", "Tom and Sue", "One day"]
    want = [m.generate(p, method="h2o:budget=32", steps=60) for p in prompts]
    got = [None] * len(prompts)

    def run(i):
        got[i] = m.generate(prompts[i], method="h2o:budget=32", steps=60)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == want


def test_set_threads_changes_no_result(model_file):
    m = vq.Model(model_file("stories260K.gguf"))
    before = vq.get_threads()
    assert before >= 1
    with pytest.raises(ValueError, match="0"):
        vq.set_threads(0)
    with pytest.raises(ValueError, match="5000"):
        vq.set_threads(5000)
    out = []
    try:
        for n in (1, 3):
            vq.set_threads(n)
            assert vq.get_threads() == n
            out.append(m.evaluate(text=PROMPT * 20, methods="h2o:budget=32,recent=8",
                                  max_tokens=200))
    finally:
        vq.set_threads(before)
    timing = {"seconds", "tokens_per_s"}

    def results(r):
        return [{k: v for k, v in m.items() if k not in timing}
                for m in [r["reference"], *r["methods"]]]

    assert results(out[0]) == results(out[1])
    assert results(out[0])[1]["kl_mean"] > 0

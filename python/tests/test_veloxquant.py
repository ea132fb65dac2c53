"""The Python bindings: caches on NumPy arrays, compress/decompress, errors, and agreement with
the CLI (same .vqkv bytes, same eviction decisions, .npy files NumPy and the CLI both read)."""
import subprocess

import numpy as np
import pytest

import veloxquant as vq


def rng(seed):
    return np.random.default_rng(seed)


def kv(seed, B=1, H=2, S=40, D=16, dtype=np.float32):
    r = rng(seed)
    scale = 1.0 / (1.0 + 0.3 * np.arange(D))
    k = (r.standard_normal((B, H, S, D)) * scale).astype(dtype)
    v = (r.standard_normal((B, H, S, D)) * scale).astype(dtype)
    return k, v


def test_methods_and_info():
    ids = vq.methods()
    assert {"full", "h2o", "curdkv", "kvtc", "q8_0"} <= set(ids)
    info = vq.method_info("curdkv")
    assert info["family"] == "eviction"
    assert any(o["name"] == "budget" for o in info["options"])
    assert vq.method_info("kvtc")["family"] == "transform"
    assert vq.canonical_spec("curdkv:budget=64") == "curdkv:budget=64"


def test_full_cache_returns_everything_in_order():
    k, v = kv(1)
    cache = vq.Cache("full", head_dim=16)
    K, V, pos = cache.update_and_fetch(k, v)
    assert K.dtype == np.float32 and K.shape == k.shape
    # the full cache stores fp16 rows: what comes back is the input rounded to fp16
    np.testing.assert_array_equal(K, k.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(V, v.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(pos[0, 0], np.arange(40))
    assert pos.dtype == np.int64
    assert cache.offset == 40
    st = cache.stats
    assert st["tokens_seen"] == 40 and st["tokens_kept"] == 40
    assert st["full_seq_bytes"] == 1 * 2 * 40 * 16 * 2 * 2
    assert st["stored_bytes"] == st["full_seq_bytes"]
    assert st["compression_ratio"] == pytest.approx(st["full_seq_bytes"] / st["kept_bytes"])
    assert st["compression_ratio"] < 1.0  # positions and spare capacity are counted too


def test_eviction_budget_dtype_and_streaming():
    k, v = kv(2, dtype=np.float16)
    cache = vq.Cache("curdkv:budget=16", head_dim=16)
    K, V, pos = cache.update_and_fetch(k[:, :, :24], v[:, :, :24])
    for s in range(24, 40):
        K, V, pos = cache.update_and_fetch(k[:, :, s:s + 1], v[:, :, s:s + 1])
    assert K.dtype == np.float16 and K.shape == (1, 2, 16, 16)
    for h in range(2):
        assert np.all(np.diff(pos[0, h]) > 0)
        # Kept rows are the input rows at the kept positions.
        np.testing.assert_array_equal(K[0, h], k[0, h, pos[0, h]])
        np.testing.assert_array_equal(V[0, h], v[0, h, pos[0, h]])
    st = cache.stats
    assert st["tokens_seen"] == 40 and st["tokens_kept"] == 16
    assert st["stored_bytes"] == pytest.approx(st["full_seq_bytes"] * 16 / 40)


def test_queries_and_noncontiguous_inputs():
    k, v = kv(3, S=30)
    q = rng(4).standard_normal((1, 4, 30, 16)).astype(np.float32)
    cache = vq.Cache("h2o:budget=10", head_dim=16)
    # A transposed view is not C-contiguous; the binding must copy it correctly.
    kt = np.ascontiguousarray(k.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    assert not kt.flags["C_CONTIGUOUS"]
    K, _, pos = cache.update_and_fetch(kt, v, queries=q)
    assert K.shape == (1, 2, 10, 16)
    np.testing.assert_array_equal(K[0, 1], k[0, 1, pos[0, 1]].astype(np.float16).astype(np.float32))


def test_transform_cache_stats_have_method_fields():
    k, v = kv(5, S=64)
    cache = vq.Cache("kvtc:bit_budget=32", head_dim=16)
    K, V, pos = cache.update_and_fetch(k, v)
    assert K.shape == k.shape
    st = cache.stats
    parts = ("content_bytes", "codec_param_bytes", "policy_bytes", "index_bytes", "overhead_bytes")
    assert st["kept_bytes"] == pytest.approx(sum(st[p] for p in parts)) and st["kept_bytes"] > 0
    assert st["compression_ratio"] == pytest.approx(st["full_seq_bytes"] / st["kept_bytes"])
    assert st["stored_bytes"] > 0


def test_composed_spec_evicts_and_quantizes():
    k, v = kv(6, S=96)
    cache = vq.Cache("streaming_llm:budget=32+q8_0:block=16", head_dim=16)
    K, V, pos = cache.update_and_fetch(k, v)
    assert K.shape[2] == 32
    st = cache.stats
    # 32 rows per head of one 18-byte q8_0 block (16 values) for K and for V
    assert st["stored_bytes"] == 2 * k.shape[1] * 32 * 18
    with pytest.raises(ValueError, match="two|policy|codec"):
        vq.Cache("h2o:budget=8+snapkv:budget=8", head_dim=16)


def test_errors_are_value_errors_with_the_library_message():
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        vq.Cache("nope", head_dim=8)
    with pytest.raises(ValueError, match="budget"):
        vq.Cache("curdkv:budget=0", head_dim=8)
    cache = vq.Cache("full", head_dim=8)
    k, v = kv(6, D=16)
    with pytest.raises(ValueError, match="head_dim"):
        cache.update(k, v)
    k, v = kv(6, D=8)
    k[0, 0, 3, 2] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        cache.update(k, v)
    with pytest.raises(ValueError, match="4-d"):
        cache.update(k[0], v[0])
    with pytest.raises(ValueError, match="int64"):
        cache.update(np.zeros(k.shape, dtype=np.int64), v)


@pytest.mark.parametrize("shape", [(64, 32), (3, 64, 32), (2, 3, 64, 32), (2, 2, 3, 64, 32)])
def test_compress_round_trip_shapes(shape):
    x = rng(7).standard_normal(shape).astype(np.float32)
    blob = vq.compress(x, "q8_0:block=8")
    assert isinstance(blob, bytes)
    y = vq.decompress(blob)
    assert y.shape == x.shape and y.dtype == np.float32
    assert np.sqrt(np.mean((y - x) ** 2) / np.mean(x ** 2)) < 0.01
    info = vq.info(blob)
    assert info["shape"] == shape and info["file_bytes"] == len(blob)
    assert info["compression_ratio"] > 1.5  # q8_0: 8.5 bits per value plus the header


def test_compress_is_deterministic_and_keeps_float16():
    x = rng(8).standard_normal((2, 64, 16)).astype(np.float16)
    a = vq.compress(x, "kvtc:bit_budget=48")
    assert a == vq.compress(x.copy(), "kvtc:bit_budget=48")
    y = vq.decompress(a)
    assert y.dtype == np.float16 and y.shape == x.shape
    assert vq.decompress(a, dtype=np.float32).dtype == np.float32
    # Same values given as float32 differ only in the recorded source dtype byte (and checksum).
    b = vq.compress(x.astype(np.float32), "kvtc:bit_budget=48")
    assert len(a) == len(b) and a != b
    hb = vq.info(a)["header_bytes"]
    diff = {i for i in range(len(a)) if a[i] != b[i]}
    assert diff <= {17} | set(range(hb - 8, hb)), sorted(diff)[:10]


def test_damaged_blobs_raise_value_error():
    x = rng(9).standard_normal((2, 20, 8)).astype(np.float32)
    blob = vq.compress(x, "kvtc:bit_budget=16")
    for cut in range(0, len(blob), 7):
        with pytest.raises(ValueError):
            vq.decompress(blob[:cut])
    bad = bytearray(blob)
    bad[len(bad) // 2] ^= 0x04
    with pytest.raises(ValueError, match="checksum"):
        vq.decompress(bytes(bad))
    with pytest.raises(ValueError, match="no block codec"):
        vq.compress(x, "h2o:budget=8")
    with pytest.raises(ValueError):
        vq.compress(x.astype(np.int32), "q8_0:block=8")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("spec", ["kvtc:bit_budget=64", "q4_0:block=8", "svdq_split"])
def test_python_and_cli_give_identical_bytes(tmp_path, cli, dtype, spec):
    x = rng(10).standard_normal((2, 2, 2, 48, 16)).astype(dtype)
    np.save(tmp_path / "kv.npy", x)
    subprocess.run([cli, "-q", "compress", "--method", spec, str(tmp_path / "kv.npy"),
                    str(tmp_path / "kv.vqkv")], check=True)
    assert (tmp_path / "kv.vqkv").read_bytes() == vq.compress(x, spec)
    # And the CLI's decompressed .npy is what Python decodes, readable by NumPy.
    subprocess.run([cli, "-q", "decompress", str(tmp_path / "kv.vqkv"),
                    str(tmp_path / "back.npy")], check=True)
    back = np.load(tmp_path / "back.npy")
    assert back.dtype == dtype
    np.testing.assert_array_equal(back, vq.decompress(vq.compress(x, spec)))


def test_cli_evict_matches_python_cache(tmp_path, cli):
    k, v = kv(11, H=3, S=70)
    np.save(tmp_path / "k.npy", k[0])
    np.save(tmp_path / "v.npy", v[0])
    spec, prefill = "curdkv:budget=20,n_sink=2", 25
    subprocess.run([cli, "-q", "evict", "--method", spec, "--keys", str(tmp_path / "k.npy"),
                    "--values", str(tmp_path / "v.npy"), "--prefill", str(prefill),
                    "--out", str(tmp_path / "kept.npy")], check=True)
    kept = np.load(tmp_path / "kept.npy")
    cache = vq.Cache(spec, head_dim=16)
    cache.update(k[:, :, :prefill], v[:, :, :prefill])
    for s in range(prefill, 70):
        cache.update(k[:, :, s:s + 1], v[:, :, s:s + 1])
    _, _, pos = cache.fetch()
    assert kept.dtype == np.int64
    np.testing.assert_array_equal(kept, pos[0])


def test_cli_reads_what_numpy_writes_and_refuses_what_it_should(tmp_path, cli):
    x = rng(12).standard_normal((2, 32, 8))
    ok = {"f64.npy": x, "f32.npy": x.astype(np.float32), "f16.npy": x.astype(np.float16)}
    for name, arr in ok.items():
        np.save(tmp_path / name, arr)
    with open(tmp_path / "v2.npy", "wb") as f:
        np.lib.format.write_array(f, x.astype(np.float32), version=(2, 0))
    with open(tmp_path / "v3.npy", "wb") as f:
        np.lib.format.write_array(f, x.astype(np.float32), version=(3, 0))
    for name in list(ok) + ["v2.npy", "v3.npy"]:
        r = subprocess.run([cli, "-q", "compress", "-m", "q8_0:block=8", str(tmp_path / name),
                            str(tmp_path / "o.vqkv")], capture_output=True, text=True)
        assert r.returncode == 0, (name, r.stderr)
    bad = {
        "be.npy": (x.astype(">f4"), "big-endian"),
        "fortran.npy": (np.asfortranarray(x.astype(np.float32)), "Fortran"),
        "int.npy": (x.astype(np.int16), "unsupported dtype"),
        "rank1.npy": (x.astype(np.float32).ravel(), "rank 1"),
    }
    for name, (arr, needle) in bad.items():
        np.save(tmp_path / name, arr)
        r = subprocess.run([cli, "compress", "-m", "q8_0:block=8", str(tmp_path / name),
                            str(tmp_path / "o.vqkv")], capture_output=True, text=True)
        assert r.returncode == 1, name
        assert needle in r.stderr and r.stderr.count("\n") == 1, (name, r.stderr)
    # A truncated .npy: header lie detected.
    raw = (tmp_path / "f32.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(raw[:-5])
    r = subprocess.run([cli, "compress", "-m", "q8_0:block=8", str(tmp_path / "cut.npy"),
                        str(tmp_path / "o.vqkv")], capture_output=True, text=True)
    assert r.returncode == 1 and "truncated" in r.stderr

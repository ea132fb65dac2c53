"""Issue 16 in Python: one Cache shared by threads is serialized (no crash, nothing lost), values a
codec cannot store are refused at compress time, decompress takes any byte buffer and refuses a
float16 result that would hold Inf."""
import threading

import numpy as np
import pytest

import veloxquant as vq


def _kv(seed, S, H=2, D=16):
    r = np.random.default_rng(seed)
    return (r.standard_normal((1, H, S, D)).astype(np.float32),
            r.standard_normal((1, H, S, D)).astype(np.float32))


@pytest.mark.parametrize("spec", ["full", "curdkv:budget=24", "kvtc:bit_budget=32,chunk_tokens=8"])
def test_two_threads_on_one_cache_are_serialized(spec):
    # Before the per-object lock this crashed the interpreter (double free) in most runs.
    cache = vq.Cache(spec, head_dim=16)
    steps, errors = 150, []

    def work(seed):
        try:
            for s in range(steps):
                k, v = _kv(seed * 1000 + s, 1)
                cache.update(k, v)
                K, V, pos = cache.fetch()
                assert K.shape == V.shape and K.shape[:3] == pos.shape
                _ = cache.stats, cache.offset, repr(cache)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # Every update of both threads landed, one after the other.
    assert cache.offset == 2 * steps
    assert cache.stats["tokens_seen"] == 2 * steps


def test_separate_caches_in_threads_match_a_serial_run():
    k, v = _kv(5, 64)

    def run():
        c = vq.Cache("curdkv:budget=16", head_dim=16)
        for s in range(64):
            c.update(k[:, :, s:s + 1], v[:, :, s:s + 1])
        return c.fetch()[2]

    want = run()
    got = [None] * 3

    def work(i):
        got[i] = run()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g in got:
        np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("spec,value", [("kivi", 7e4), ("gear", 7e4), ("q8_0:block=8", 1e38),
                                        ("q4_0:block=8", 1e38), ("kvtc:bit_budget=32", 1e38)])
def test_compress_refuses_values_outside_the_codec_range(spec, value):
    a = np.random.default_rng(1).standard_normal((2, 64, 16)).astype(np.float32)
    a[1, 5, 3] = value
    with pytest.raises(ValueError, match=r"at \[1, 5, 3\] is outside the range of"):
        vq.compress(a, spec)


def test_decompress_accepts_any_byte_buffer():
    a = np.random.default_rng(2).standard_normal((2, 32, 16)).astype(np.float32)
    blob = vq.compress(a, "q8_0:block=8")
    want = vq.decompress(blob)
    for b in (bytearray(blob), memoryview(blob), np.frombuffer(blob, dtype=np.uint8)):
        np.testing.assert_array_equal(vq.decompress(b), want)
        assert vq.info(b)["shape"] == (2, 32, 16)
    with pytest.raises(TypeError, match="contiguous byte buffer"):
        vq.decompress(12345)


def test_decompress_to_float16_refuses_values_beyond_its_range():
    a = np.random.default_rng(3).standard_normal((2, 32, 16)).astype(np.float32)
    a[0, 1, 2] = 1e6
    blob = vq.compress(a, "q8_0:block=8")
    assert np.isfinite(vq.decompress(blob)).all()
    with pytest.raises(ValueError, match="outside float16's range"):
        vq.decompress(blob, dtype="float16")

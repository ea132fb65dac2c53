#!/usr/bin/python3
"""Write the seed corpora of the GGUF and safetensors fuzz targets (fuzz/corpus/gguf,
fuzz/corpus/safetensors). An independent writer from the public format descriptions (GGUF v3 /
v2 little-endian; safetensors: u64 header length + JSON + data). Run from the repository root."""
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def gstr(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf(kvs, tensors, version=3, align=32):
    """kvs: list of (key, type_id, payload bytes); tensors: list of (name, ggml type, dims, data)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, p in kvs:
        out += gstr(k) + struct.pack("<I", t) + p
    off, offs = 0, []
    for _, _, _, data in tensors:
        off = (off + align - 1) // align * align
        offs.append(off)
        off += len(data)
    for (name, ty, dims, _), o in zip(tensors, offs):
        out += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ty, o)
    out += b"\0" * ((-len(out)) % align)
    base = len(out)
    for (_, _, _, data), o in zip(tensors, offs):
        out += b"\0" * (base + o - len(out)) + data
    return out


def arr(elem_type, fmt, values):
    return struct.pack("<IQ", elem_type, len(values)) + b"".join(struct.pack(fmt, v) for v in values)


def sarr(values):
    return struct.pack("<IQ", 8, len(values)) + b"".join(gstr(v) for v in values)


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    f32 = struct.pack("<8f", *[0.5 * i - 1 for i in range(8)])
    q8 = struct.pack("<e", 0.01) + bytes(range(32))
    q4k = struct.pack("<ee", 0.01, 0.02) + bytes(range(12)) + bytes((7 * i) & 255 for i in range(128))
    q6k = bytes((3 * i) & 255 for i in range(192)) + bytes(16) + struct.pack("<e", 0.001)
    meta = [("general.architecture", 8, gstr("llama")), ("llama.context_length", 4, struct.pack("<I", 64)),
            ("t.f32", 6, struct.pack("<f", 1.5)), ("t.bool", 7, b"\1"), ("t.i64", 11, struct.pack("<q", -3)),
            ("t.arr", 9, arr(5, "<i", [1, 2, 3]))]
    write("gguf", "tensors_v3", gguf(meta, [("w", 0, [4, 2], f32), ("q", 8, [32], q8), ("k4", 12, [256], q4k),
                                            ("k6", 14, [256], q6k)]))
    write("gguf", "tensors_v2", gguf(meta[:2], [("w", 0, [8], f32)], version=2))
    spm = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "ab", "\u2581ab", "<0x0A>", "[U]"]
    write("gguf", "vocab_llama", gguf([
        ("tokenizer.ggml.model", 8, gstr("llama")), ("tokenizer.ggml.tokens", 9, sarr(spm)),
        ("tokenizer.ggml.scores", 9, arr(6, "<f", [0, 0, 0, -1, -2, -2, -0.5, -0.1, 0, 0])),
        ("tokenizer.ggml.token_type", 9, arr(5, "<i", [2, 3, 3, 1, 1, 1, 1, 1, 6, 4])),
        ("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 1))], []))
    bpe = ["a", "b", "ab", "\u0120", "\u0120a", "O", "n", "c", "e", "<|endoftext|>"]
    write("gguf", "vocab_gpt2", gguf([
        ("tokenizer.ggml.model", 8, gstr("gpt2")), ("tokenizer.ggml.pre", 8, gstr("llama-bpe")),
        ("tokenizer.ggml.tokens", 9, sarr(bpe)), ("tokenizer.ggml.merges", 9, sarr(["a b", "\u0120 a"])),
        ("tokenizer.ggml.token_type", 9, arr(5, "<i", [1] * 9 + [3]))], []))

    def st(tensors, meta=None):
        header, data = {}, b""
        for name, dtype, shape, raw in tensors:
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
            data += raw
        if meta:
            header["__metadata__"] = meta
        h = json.dumps(header).encode()
        h += b" " * ((-len(h)) % 8)
        return struct.pack("<Q", len(h)) + h + data

    write("safetensors", "three_dtypes", st([("a", "F32", [2, 4], f32), ("b", "F16", [3], struct.pack("<3e", 1, -2, 0.5)),
                                             ("c", "BF16", [2], bytes([0x80, 0x3f, 0x00, 0xc0]))], {"format": "pt"}))
    write("safetensors", "empty_tensor", st([("z", "F32", [0, 3], b""), ("s", "F32", [], struct.pack("<f", 2))]))


if __name__ == "__main__":
    main()

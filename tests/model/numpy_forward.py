#!/usr/bin/python3
"""Independent NumPy forward pass of a GGUF file or a Hugging Face directory, for the engine tests.

Usage: numpy_forward.py MODEL TOKENS.npy OUT.npy [--fp16-kv] [--input-levels L [--levels-from P]]

Reads the model itself (GGUF: header, metadata, tensor infos, and every supported block type
decoded here from the ggml block layouts; Hugging Face: config.json + model.safetensors), runs the
tokens one position at a time in float64 with causal attention over every earlier position, and
writes the logits [n_tokens, vocab] as float32. --fp16-kv rounds keys (after RoPE) and values to
float16 before they are attended to, as VeloxQuant's `full` cache keeps them. --input-levels L
rounds the input of every matrix product per 32 values to integer levels of the block's largest
magnitude, x ~= (amax / L) * round(x * L / amax) in float32, as the engine's matrix-vector
products with block-quantized weights do (src/kernels/row_dot.hpp); positions before P (0 by
default) round only the output product's, as the engine's prefill does (its layers multiply
matrices; its logits are one matrix-vector product per position).
"""
import json
import os
import struct
import sys

import numpy as np

# ---------------------------------------------------------------------------- GGUF reading

F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30
BLOCK = {F32: (1, 4), F16: (1, 2), BF16: (1, 2), Q4_0: (32, 18), Q4_1: (32, 20), Q5_0: (32, 22),
         Q5_1: (32, 24), Q8_0: (32, 34), Q4_K: (256, 144), Q5_K: (256, 176), Q6_K: (256, 210)}


class Reader:
    def __init__(self, b):
        self.b, self.o = b, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.b, self.o)
        self.o += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = self.b[self.o:self.o + n].decode("utf-8", "replace")
        self.o += n
        return s

    def value(self, t):
        fmts = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
                12: "d"}
        if t in fmts:
            return self.take(fmts[t])
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("I"), self.take("Q")
            return [self.value(et) for _ in range(n)]
        raise ValueError("metadata type %d" % t)


def f16(raw):
    return np.frombuffer(raw, dtype="<f2").astype(np.float64)


def dequant(t, raw, n):
    """n values of type t from bytes raw, as float64."""
    if t == F32:
        return np.frombuffer(raw, dtype="<f4").astype(np.float64)
    if t == F16:
        return f16(raw)
    if t == BF16:
        u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64)
    bv, bb = BLOCK[t]
    blk = np.frombuffer(raw, dtype=np.uint8).reshape(-1, bb)
    nb = blk.shape[0]
    if t in (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1):
        d = f16(blk[:, 0:2].tobytes())[:, None]
        if t == Q8_0:
            return (d * blk[:, 2:].view(np.int8)).reshape(-1)
        m = f16(blk[:, 2:4].tobytes())[:, None] if t in (Q4_1, Q5_1) else None
        qs_at = {Q4_0: 2, Q4_1: 4, Q5_0: 6, Q5_1: 8}[t]
        qs = blk[:, qs_at:qs_at + 16].astype(np.int64)
        q = np.concatenate([qs & 15, qs >> 4], axis=1)  # element j: low nibbles, then high
        if t in (Q5_0, Q5_1):
            hi_at = 2 if t == Q5_0 else 4
            hi = blk[:, hi_at:hi_at + 4].copy().view("<u4").astype(np.int64)  # [nb, 1]
            bits = (hi >> np.arange(32)[None, :]) & 1
            q = q | (bits << 4)
        if t == Q4_0:
            return (d * (q - 8)).reshape(-1)
        if t == Q5_0:
            return (d * (q - 16)).reshape(-1)
        return (d * q + m).reshape(-1)
    out = np.zeros((nb, 256))
    if t in (Q4_K, Q5_K):
        d = f16(blk[:, 0:2].tobytes())
        dmin = f16(blk[:, 2:4].tobytes())
        sc = blk[:, 4:16].astype(np.int64)
        scales, mins = np.zeros((nb, 8), np.int64), np.zeros((nb, 8), np.int64)
        for j in range(8):
            if j < 4:
                scales[:, j], mins[:, j] = sc[:, j] & 63, sc[:, j + 4] & 63
            else:
                scales[:, j] = (sc[:, j + 4] & 15) | ((sc[:, j - 4] >> 6) << 4)
                mins[:, j] = (sc[:, j + 4] >> 4) | ((sc[:, j] >> 6) << 4)
        qs_at = 16 if t == Q4_K else 48
        qs = blk[:, qs_at:qs_at + 128].astype(np.int64)
        qh = blk[:, 16:48].astype(np.int64) if t == Q5_K else None
        for c in range(4):  # 64 values per chunk: 32 low nibbles (sub-block 2c), 32 high (2c+1)
            lo = qs[:, 32 * c:32 * c + 32] & 15
            up = qs[:, 32 * c:32 * c + 32] >> 4
            if qh is not None:
                lo = lo | (((qh >> (2 * c)) & 1) << 4)
                up = up | (((qh >> (2 * c + 1)) & 1) << 4)
            for s, q in ((2 * c, lo), (2 * c + 1, up)):
                out[:, 32 * s:32 * s + 32] = (d * scales[:, s])[:, None] * q - \
                    (dmin * mins[:, s])[:, None]
        return out.reshape(-1)
    if t == Q6_K:
        ql = blk[:, 0:128].astype(np.int64)
        qh = blk[:, 128:192].astype(np.int64)
        sc = blk[:, 192:208].view(np.int8).astype(np.int64)
        d = f16(blk[:, 208:210].tobytes())
        for h in range(2):  # two halves of 128 values
            L, H = ql[:, 64 * h:64 * h + 64], qh[:, 32 * h:32 * h + 32]
            for l in range(32):
                vals = [(L[:, l] & 15) | (((H[:, l] >> 0) & 3) << 4),
                        (L[:, l + 32] & 15) | (((H[:, l] >> 2) & 3) << 4),
                        (L[:, l] >> 4) | (((H[:, l] >> 4) & 3) << 4),
                        (L[:, l + 32] >> 4) | (((H[:, l] >> 6) & 3) << 4)]
                for k in range(4):
                    idx = 128 * h + 32 * k + l
                    out[:, idx] = d * sc[:, 8 * h + 2 * k + l // 16] * (vals[k] - 32)
        return out.reshape(-1)
    raise ValueError("type %d" % t)


def read_gguf(path):
    b = open(path, "rb").read()
    r = Reader(b)
    assert b[:4] == b"GGUF"
    r.o = 4
    version, n_t, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    assert version in (2, 3)
    meta = {}
    for _ in range(n_kv):
        k = r.string()
        meta[k] = r.value(r.take("I"))
    infos = []
    for _ in range(n_t):
        name = r.string()
        nd = r.take("I")
        dims = [r.take("Q") for _ in range(nd)]
        infos.append((name, dims, r.take("I"), r.take("Q")))
    align = meta.get("general.alignment", 32)
    data = (r.o + align - 1) // align * align
    tensors = {}
    for name, dims, t, off in infos:
        n = int(np.prod(dims))
        bv, bb = BLOCK[t]
        raw = b[data + off:data + off + n // bv * bb]
        tensors[name] = dequant(t, raw, n).reshape(list(reversed(dims)))
    arch = meta["general.architecture"]
    p = arch + "."
    cfg = dict(arch=arch, n_heads=meta[p + "attention.head_count"],
               n_kv=meta.get(p + "attention.head_count_kv", meta[p + "attention.head_count"]),
               eps=meta.get(p + "attention.layer_norm_rms_epsilon", 1e-5),
               theta=meta.get(p + "rope.freq_base", 10000.0),
               n_layers=meta[p + "block_count"], neox=(arch == "qwen2"), scaling=None,
               window=meta.get(p + "attention.sliding_window", 0))
    return cfg, tensors


# ---------------------------------------------------------------------------- safetensors

HF_NAMES = {"input_layernorm.weight": "attn_norm.weight",
            "post_attention_layernorm.weight": "ffn_norm.weight",
            "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
            "self_attn.v_proj.weight": "attn_v.weight",
            "self_attn.o_proj.weight": "attn_output.weight",
            "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
            "self_attn.v_proj.bias": "attn_v.bias", "mlp.gate_proj.weight": "ffn_gate.weight",
            "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}


def read_hf(d):
    c = json.load(open(os.path.join(d, "config.json")))
    b = open(os.path.join(d, "model.safetensors"), "rb").read()
    hl = struct.unpack_from("<Q", b, 0)[0]
    header = json.loads(b[8:8 + hl])
    base = 8 + hl
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        raw = b[base + s:base + e]
        t = {"F32": F32, "F16": F16, "BF16": BF16}[info["dtype"]]
        v = dequant(t, raw, int(np.prod(info["shape"]))).reshape(info["shape"])
        if name == "model.embed_tokens.weight":
            tensors["token_embd.weight"] = v
        elif name == "model.norm.weight":
            tensors["output_norm.weight"] = v
        elif name == "lm_head.weight":
            tensors["output.weight"] = v
        elif name.startswith("model.layers."):
            parts = name.split(".")
            tensors["blk.%s.%s" % (parts[2], HF_NAMES[".".join(parts[3:])])] = v
    if c.get("tie_word_embeddings", False):
        tensors.pop("output.weight", None)
    cfg = dict(arch=c["model_type"], n_heads=c["num_attention_heads"],
               n_kv=c.get("num_key_value_heads", c["num_attention_heads"]),
               eps=c.get("rms_norm_eps", 1e-6), theta=c.get("rope_theta", 10000.0),
               n_layers=c["num_hidden_layers"], neox=True, scaling=c.get("rope_scaling"),
               window=(c.get("sliding_window") or 0) if c["model_type"] == "mistral" else 0)
    return cfg, tensors


# ---------------------------------------------------------------------------- forward pass

def inv_freq(cfg, D, tensors):
    f = cfg["theta"] ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    s = cfg["scaling"]
    if s and s.get("rope_type", s.get("type")) == "llama3":
        old = s["original_max_position_embeddings"]
        lo_w, hi_w = old / s["low_freq_factor"], old / s["high_freq_factor"]
        out = []
        for x in f:
            w = 2 * np.pi / x
            if w < hi_w:
                out.append(x)
            elif w > lo_w:
                out.append(x / s["factor"])
            else:
                a = (old / w - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
                out.append((1 - a) * x / s["factor"] + a * x)
        f = np.array(out)
    if "rope_freqs.weight" in tensors:
        f = f / tensors["rope_freqs.weight"]
    return f


def rope(v, pos, freqs, neox):
    """v: [heads, D]."""
    D = v.shape[1]
    c, s = np.cos(pos * freqs), np.sin(pos * freqs)
    out = v.copy()
    if neox:
        a, b = v[:, :D // 2], v[:, D // 2:]
        out[:, :D // 2], out[:, D // 2:] = a * c - b * s, a * s + b * c
    else:
        a, b = v[:, 0::2], v[:, 1::2]
        out[:, 0::2], out[:, 1::2] = a * c - b * s, a * s + b * c
    return out


def round_levels(x, levels):
    """x rounded per 32 values to `levels` integer levels of each block's largest magnitude."""
    b = x.astype(np.float32).reshape(-1, 32)
    amax = np.abs(b).max(axis=1, keepdims=True)
    amax = np.where(amax > 0, amax, np.float32(1))  # an all-zero block stays zero
    q = np.clip(np.rint(b * (np.float32(levels) / amax)), -levels, levels)
    return (q * (amax / np.float32(levels))).astype(np.float64).reshape(-1)


def forward(cfg, T, tokens, fp16_kv, levels=0, levels_from=0):
    def rms(x, w):
        return w * x / np.sqrt(np.mean(x * x) + cfg["eps"])

    emb = T["token_embd.weight"]
    out_w = T.get("output.weight", emb)
    Hq, Hkv = cfg["n_heads"], cfg["n_kv"]
    dim = emb.shape[1]
    D = dim // Hq
    freqs = inv_freq(cfg, D, T)
    rnd = (lambda a: a.astype(np.float16).astype(np.float64)) if fp16_kv else (lambda a: a)
    Ks = [[] for _ in range(cfg["n_layers"])]
    Vs = [[] for _ in range(cfg["n_layers"])]
    logits = []
    for pos, tok in enumerate(tokens):
        rounded = (lambda a: round_levels(a, levels)) if levels else (lambda a: a)
        inp = rounded if pos >= levels_from else (lambda a: a)
        x = emb[tok].copy()
        for l in range(cfg["n_layers"]):
            p = "blk.%d." % l
            xn = inp(rms(x, T[p + "attn_norm.weight"]))
            q, k, v = T[p + "attn_q.weight"] @ xn, T[p + "attn_k.weight"] @ xn, \
                T[p + "attn_v.weight"] @ xn
            if p + "attn_q.bias" in T:
                q, k, v = q + T[p + "attn_q.bias"], k + T[p + "attn_k.bias"], \
                    v + T[p + "attn_v.bias"]
            q = rope(q.reshape(Hq, D), pos, freqs, cfg["neox"])
            k = rope(k.reshape(Hkv, D), pos, freqs, cfg["neox"])
            Ks[l].append(rnd(k))
            Vs[l].append(rnd(v.reshape(Hkv, D)))
            K, V = np.stack(Ks[l], 1), np.stack(Vs[l], 1)  # [Hkv, n, D]
            if cfg["window"] > 0:  # sliding window: the last `window` positions, this one included
                K, V = K[:, -cfg["window"]:], V[:, -cfg["window"]:]
            att = np.zeros((Hq, D))
            for h in range(Hq):
                kh = h // (Hq // Hkv)
                sc = K[kh] @ q[h] / np.sqrt(D)
                w = np.exp(sc - sc.max())
                att[h] = (w / w.sum()) @ V[kh]
            x = x + T[p + "attn_output.weight"] @ inp(att.reshape(-1))
            xn = inp(rms(x, T[p + "ffn_norm.weight"]))
            g, u = T[p + "ffn_gate.weight"] @ xn, T[p + "ffn_up.weight"] @ xn
            x = x + T[p + "ffn_down.weight"] @ inp(g / (1 + np.exp(-g)) * u)
        logits.append(out_w @ rounded(rms(x, T["output_norm.weight"])))
    return np.array(logits, dtype=np.float32)


def main():
    model, tok_path, out = sys.argv[1:4]
    opts = sys.argv[4:]
    fp16_kv = "--fp16-kv" in opts

    def number(flag):
        return int(opts[opts.index(flag) + 1]) if flag in opts else 0

    cfg, T = read_hf(model) if os.path.isdir(model) else read_gguf(model)
    tokens = np.load(tok_path).astype(np.int64).reshape(-1)
    np.save(out, forward(cfg, T, tokens, fp16_kv, number("--input-levels"),
                         number("--levels-from")))


if __name__ == "__main__":
    main()

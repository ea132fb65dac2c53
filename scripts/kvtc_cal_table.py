#!/usr/bin/env python3
"""Markdown table of the calibrated-KVTC study (scripts/eval_kvtc_calibrated.sh output).

usage: python3 scripts/kvtc_cal_table.py PREFIX   (reads PREFIX.json and, if present, PREFIX_chase.json)

Rows: configurations (the basis file paths removed), columns: bits per value, cells
"KL / top-1 / stored ratio / resident ratio": fp16 bytes of the tokens seen over the K/V bytes in
storage form (what a .vqkv file holds: codes, per-chunk parameters, fp16 windows) and over the
resident bytes (everything the cache holds, positions and spare capacity included), both averaged
over positions. Then every run that meets the goal (mean KL < 0.01 nats and top-1 > 0.99), best
stored ratio first.
"""
import json
import os
import re
import sys

GOAL_KL, GOAL_TOP1 = 0.01, 0.99


def label(spec, head_dim):
    method, _, opts = spec.partition(":")
    kv = dict(o.split("=", 1) for o in opts.split(",") if "=" in o)
    bits = None
    if "bit_budget" in kv:
        bits = int(kv.pop("bit_budget")) // head_dim
    elif "bits" in kv:
        bits = int(kv.pop("bits"))
    if method != "kvtc":
        return method, bits
    parts = []
    basis = kv.pop("basis", "local")
    parts.append("local basis" if basis == "local" else "calibrated basis")
    if kv.pop("rope", "post") == "pre":
        parts.append("pre-RoPE")
    alloc = kv.pop("alloc", "dp")
    if alloc == "dp_measured":
        parts.append("measured DP")
    if kv.pop("quant", "chunk") == "calibrated":
        parts.append("calibrated ranges")
    if kv.pop("entropy", "huffman") == "auto":
        parts.append("range coder")
    for k in ("chunk_tokens", "sink_tokens", "recent_tokens"):
        if k in kv:
            parts.append("%s=%s" % (k.split("_")[0], kv.pop(k)))
    parts += ["%s=%s" % x for x in kv.items()]
    return "kvtc: " + ", ".join(parts), bits


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    runs, rows, order = [], {}, []
    for path in (argv[1] + ".json", argv[1] + "_chase.json"):
        if not os.path.exists(path):
            continue
        with open(path) as f:
            res = json.load(f)
        D = res["config"]["head_dim"]
        for m in res["methods"]:
            if m["spec"] == "full":
                continue
            name, bits = label(m["spec"], D)
            if name not in rows:
                order.append(name)
            rows.setdefault(name, {})[bits] = m
            runs.append((name, bits, m))
    print("%s: %d tokens evaluated after %d skipped; cells KL / top-1 / stored ratio / resident ratio\n"
          % (os.path.basename(res["model"]), res["predicted_tokens"], res.get("skip_tokens", 0)))
    cols = sorted({b for r in rows.values() for b in r if b is not None})
    print("| configuration | " + " | ".join("%d bits/value" % b for b in cols) + " | fixed rate |")
    print("|---|" + "---|" * (len(cols) + 1))
    stored = lambda m: m["fp16_bytes_per_token"] / m["stored_bytes_per_token"]
    fmt = lambda m: "%.3g / %.4f / %.2fx / %.2fx" % (m["kl_mean"], m["top1_agreement"], stored(m),
                                                     m["compression_ratio"])
    for name in order:
        r = rows[name]
        cells = [fmt(r[b]) if b in r else "" for b in cols] + [fmt(r[None]) if None in r else ""]
        print("| %s | " % name + " | ".join(cells) + " |")
    ok = [(stored(m), n, b, m) for n, b, m in runs
          if m["kl_mean"] < GOAL_KL and m["top1_agreement"] > GOAL_TOP1]
    ok.sort(key=lambda x: -x[0])
    print("\nMeeting mean KL < %g and top-1 > %g, best stored ratio first:\n" % (GOAL_KL, GOAL_TOP1))
    for ratio, n, b, m in ok[:5]:
        print("- %s%s: KL %.5f, top-1 %.4f, stored ratio %.2fx, resident %.2fx" % (
            n, "" if b is None else " at %d bits/value" % b, m["kl_mean"], m["top1_agreement"],
            ratio, m["compression_ratio"]))
    if not ok:
        print("- none")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

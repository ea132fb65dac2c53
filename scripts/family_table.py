#!/usr/bin/env python3
"""Markdown tables of a family sweep (scripts/eval_family.sh output).

usage: python3 scripts/family_table.py PREFIX   (reads PREFIX_eviction.json, PREFIX_transform.json)

Eviction: one row per method, one column per budget, cells "KL / top-1". Transform: one row per
method (the bit-width option removed), one column per bits per value where the method sweeps it,
cells "KL / top-1 / ratio"; fixed-rate methods get one cell. Plain json, no numpy.
"""
import json
import os
import re
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def cell(m, ratio=False):
    s = "%.3g / %.3f" % (m["kl_mean"], m["top1_agreement"])
    if ratio:
        s += " / %.2fx" % m["compression_ratio"]
    return s


def eviction(res):
    rows, budgets = {}, []
    for m in res["methods"]:
        if m["spec"] == "full":
            continue
        method, _, opts = m["spec"].partition(":")
        kv = dict(o.split("=", 1) for o in opts.split(",") if "=" in o)
        b = int(kv.pop("budget"))
        if "recent" in kv and int(kv["recent"]) * 2 == b:
            kv["recent"] = "budget/2"
        name = method + (" " + ",".join("%s=%s" % x for x in kv.items()) if kv else "")
        if b not in budgets:
            budgets.append(b)
        rows.setdefault(name, {})[b] = m
    budgets.sort()
    ratio = {b: next(m for r in rows.values() for bb, m in r.items() if bb == b)["compression_ratio"]
             for b in budgets}
    out = ["| method | " + " | ".join("budget %d (ratio %.2fx)" % (b, ratio[b]) for b in budgets) + " |",
           "|---|" + "---|" * len(budgets)]
    for name, r in rows.items():
        out.append("| `%s` | " % name + " | ".join(cell(r[b]) if b in r else "" for b in budgets) + " |")
    return "\n".join(out)


def transform(res, head_dim):
    rows, order = {}, []
    for m in res["methods"]:
        if m["spec"] == "full":
            continue
        method, _, opts = m["spec"].partition(":")
        kv = dict(o.split("=", 1) for o in opts.split(",") if "=" in o)
        bits = None
        if "bit_budget" in kv:
            bits = int(kv.pop("bit_budget")) // head_dim
        elif "bits" in kv:
            bits = int(kv.pop("bits"))
        elif "signal_bits" in kv:
            bits = int(kv.pop("signal_bits")) - 1
            kv["signal/noise"] = "b+1/b-1"
            kv.pop("noise_bits", None)
        name = method + (" " + ",".join("%s=%s" % x for x in kv.items()) if kv else "")
        if name not in rows:
            order.append(name)
        rows.setdefault(name, {})[bits] = m
    out = ["| method | 2 bits/value | 3 bits/value | 4 bits/value | fixed rate |",
           "|---|---|---|---|---|"]
    for name in order:
        r = rows[name]
        cells = [cell(r[b], True) if b in r else "" for b in (2, 3, 4)]
        cells.append(cell(r[None], True) if None in r else "")
        out.append("| `%s` | " % name + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    prefix = argv[1]
    for part in ("eviction", "transform"):
        path = "%s_%s.json" % (prefix, part)
        if not os.path.exists(path):
            continue
        res = load(path)
        c = res["config"]
        print("%s, %s: %d predicted tokens, full perplexity %.4f; cells KL / top-1%s\n" % (
            os.path.basename(res["model"]), part, res["predicted_tokens"],
            res["reference"]["perplexity"], " / mean ratio vs fp16" if part == "transform" else ""))
        print(eviction(res) if part == "eviction" else transform(res, c["head_dim"]))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

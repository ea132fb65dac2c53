#!/usr/bin/env python3
"""Markdown table of an `eval --protocol prefill --json` result (README "One-shot compression").

usage: /usr/bin/python3 scripts/oneshot_table.py RESULTS.json

One row per spec; for each compression ratio the mean KL over the continuation, top-1 agreement
and bytes held per token per layer-head (B/tok, mean over the continuation; fp16 in the header).
Codecs alone (no eviction) get one cell. Then, per ratio, the spec with the lowest KL, and the
smallest B/tok that reaches mean KL < 0.01 with top-1 >= 0.99 (if any run does).
"""
import json
import sys


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1]) as f:
        res = json.load(f)
    ratios = res["ratios"]
    rows, order = {}, []
    for m in res["methods"]:
        if m["spec"] == "full":
            continue
        if m["spec"] not in rows:
            rows[m["spec"]] = {}
            order.append(m["spec"])
        rows[m["spec"]][m["ratio"]] = m
    ref = res["reference"]
    print("%s: %d windows, context %d, %d continuation predictions; full: ppl %.3f, %.1f B/tok"
          % (res["model"].split("/")[-1], res["windows"], res["context"],
             res["predicted_tokens"], ref["perplexity"], ref["bytes_per_token"]))
    print()
    print("| spec | " + " | ".join("ratio %g: KL / top-1 / B/tok" % r for r in ratios) + " |")
    print("|---|" + "---|" * len(ratios))
    for spec in order:
        cells = []
        for r in ratios:
            m = rows[spec].get(r)
            if m is None and list(rows[spec]) == [0]:
                m = rows[spec][0] if r == ratios[0] else None
            cells.append("%.4f / %.3f / %.1f" % (m["kl_mean"], m["top1_agreement"],
                                                  m["bytes_per_token"]) if m else "")
        alone = list(rows[spec]) == [0]
        print("| `%s`%s | %s |" % (spec, " (codec alone, nothing evicted)" if alone else "",
                                   " | ".join(cells)))
    print()
    for r in ratios:
        cand = [(rows[s][r]["kl_mean"], s) for s in order if r in rows[s]]
        if cand:
            print("- ratio %g: lowest KL `%s` (%.4f)" % (r, min(cand)[1], min(cand)[0]))
    good = [(m["bytes_per_token"], s, m) for s in order for m in rows[s].values()
            if m["kl_mean"] < 0.01 and m["top1_agreement"] >= 0.99]
    if good:
        b, s, m = min(good, key=lambda t: t[0])
        print("- smallest B/tok with KL < 0.01 and top-1 >= 99%%: `%s` at ratio %g: %.1f B/tok "
              "(%.2fx fewer than full), KL %.4f, top-1 %.3f" % (s, m["ratio"], b,
                                                               ref["bytes_per_token"] / b,
                                                               m["kl_mean"], m["top1_agreement"]))
    else:
        print("- no run reaches KL < 0.01 with top-1 >= 99%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""Markdown table of a composed-eval JSON (scripts/eval_family.sh, part `composed`): every row
sorted by resident bytes per token (mean over positions), with KL, top-1 and perplexity, and for
each policy+codec row the best single-part row (a policy alone at fp16 or a codec alone) that
holds no fewer bytes, so a composition is judged against what its bytes could buy otherwise.

Usage: /usr/bin/python3 scripts/composed_table.py results/family_stories260K_composed.json
"""
import json
import sys


def main(path):
    d = json.load(open(path))
    rows = [m for m in d["methods"]]
    full = next(m for m in rows if m["spec"] == "full")
    singles = [m for m in rows if "+" not in m["spec"] and m["spec"] != "full"]
    print(f"{d.get('model', '?')}: {d['methods'][0]['predicted_tokens']} predicted tokens; "
          f"full: {full['bytes_per_token']:.1f} B/token, ppl {full['perplexity']:.4f}\n")
    print("| spec | B/token | ratio | KL | top-1 | ppl | best single part at >= these bytes (KL) |")
    print("|---|---|---|---|---|---|---|")
    for m in sorted(rows, key=lambda m: -m["bytes_per_token"]):
        note = ""
        if "+" in m["spec"]:
            cands = [s for s in singles if s["bytes_per_token"] >= m["bytes_per_token"]]
            if cands:
                best = min(cands, key=lambda s: s["kl_mean"])
                verdict = "composed better" if m["kl_mean"] < best["kl_mean"] else "single better"
                note = (f"`{best['spec']}` {best['bytes_per_token']:.1f} B, KL "
                        f"{best['kl_mean']:.4g}: {verdict}")
            else:
                note = "no single part at these bytes"
        print(f"| `{m['spec']}` | {m['bytes_per_token']:.1f} | {m['compression_ratio']:.2f}x | "
              f"{m['kl_mean']:.4g} | {m['top1_agreement']:.3f} | {m['perplexity']:.4f} | {note} |")


if __name__ == "__main__":
    main(sys.argv[1])

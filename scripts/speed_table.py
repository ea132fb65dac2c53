#!/usr/bin/env python3
"""Print the README's eviction speed table (markdown) from `bench speed --only eviction --json` runs.

Usage: python3 scripts/speed_table.py results/eviction_runs/*.json
Each cell is the median over the runs of the method's per-token update cost divided by the
decode attention step measured in the same run at the same (n, D), with the range over the runs
when there are several. The goal column counts the cells whose median is within the speed
issue's goal (<= 3x for the curdkv rows but curdkv_paper, <= 2x for every other policy).
"""
import json
import statistics
import sys


def fmt(r: float) -> str:
    return f"{r:.2f}x" if r < 10 else f"{r:.0f}x"


def main() -> None:
    runs = [[r for r in json.load(open(p))["rows"] if r["group"] == "eviction"] for p in sys.argv[1:]]
    cols, names = [], []
    for rows in runs:
        for r in rows:
            if (r["n"], r["D"]) not in cols:
                cols.append((r["n"], r["D"]))
            if r["name"] != "attention_step" and r["name"] not in names:
                names.append(r["name"])
    ratios, attn = {}, {}
    for rows in runs:
        for r in rows:
            key = (r["name"], r["n"], r["D"])
            if r["name"] == "attention_step":
                attn.setdefault((r["n"], r["D"]), []).append(r["value"] / 1000)
            else:
                ratios.setdefault(key, []).append(r["ratio"])
    a = " / ".join(f"{statistics.median(attn[c]):.1f}" for c in cols)
    which = "the column" if len(cols) == 1 else f"the {len(cols)} columns"
    print(f"(medians of {len(runs)} runs; attention step {a} µs for {which})")
    print()
    print("| method | " + " | ".join(f"n={n}, D={d}" for n, d in cols) + " | goal (medians) |")
    print("|---|" + "---|" * (len(cols) + 1))
    for name in names:
        cells, meds = [], []
        for n, d in cols:
            xs = ratios.get((name, n, d))
            if not xs:
                cells.append("—")
                meds.append(None)
                continue
            m = statistics.median(xs)
            meds.append(m)
            cells.append(fmt(m) if len(xs) == 1 else f"{fmt(m)} ({fmt(min(xs))}-{fmt(max(xs))})")
        goal = ""
        if name not in ("full", "curdkv_reference"):
            g = 3.0 if name.startswith("curdkv") and name != "curdkv_paper" else 2.0
            met = sum(1 for x in meds if x is not None and x <= g)
            goal = f"≤ {g:g}x: met in {met} of {len(cols)}"
        print(f"| `{name}` | " + " | ".join(cells) + f" | {goal} |")


if __name__ == "__main__":
    main()

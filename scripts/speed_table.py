#!/usr/bin/env python3
"""Print the README's eviction speed table (markdown) from `bench speed --only eviction --json`.

Usage: python3 scripts/speed_table.py results/bench_speed_eviction.json
Each cell is the method's per-token update cost divided by the decode attention step measured in
the same run at the same (n, D); the goal column counts the cells within the speed issue's goal
(<= 3x for the curdkv_fast rows, <= 2x for every other policy).
"""
import json
import sys


def fmt(r: float) -> str:
    return f"{r:.2f}x" if r < 10 else f"{r:.0f}x"


def main() -> None:
    rows = json.load(open(sys.argv[1]))["rows"]
    rows = [r for r in rows if r["group"] == "eviction"]
    cols = []
    for r in rows:
        if (r["n"], r["D"]) not in cols:
            cols.append((r["n"], r["D"]))
    names = []
    for r in rows:
        if r["name"] != "attention_step" and r["name"] not in names:
            names.append(r["name"])
    cell = {(r["name"], r["n"], r["D"]): r for r in rows}
    attn = " / ".join(f"{cell[('attention_step', n, d)]['value'] / 1000:.1f}" for n, d in cols)
    print(f"(attention step {attn} µs for the {len(cols)} columns)")
    print()
    print("| method | " + " | ".join(f"n={n}, D={d}" for n, d in cols) + " | goal |")
    print("|---|" + "---|" * (len(cols) + 1))
    for name in names:
        ratios = [cell[(name, n, d)]["ratio"] if (name, n, d) in cell else None for n, d in cols]
        goal = ""
        if name not in ("full", "curdkv_reference"):
            g = 3.0 if name.startswith("curdkv_fast") else 2.0
            met = sum(1 for x in ratios if x is not None and x <= g)
            goal = f"≤ {g:g}x: met in {met} of {len(cols)}"
        print(f"| `{name}` | " + " | ".join("—" if x is None else fmt(x) for x in ratios) +
              f" | {goal} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Median and range of each `bench speed --only attention` row's ratio over several runs.

Usage: attention_medians.py RUN1.json RUN2.json ...   (each written by
`veloxquant bench speed --only attention --json RUN.json`). Prints a Markdown table: the row, its
median ratio, the range over the runs, what the ratio is against, and in how many runs a row with
a goal in its note ("goal >= x") met it.
"""
import json
import re
import statistics
import sys


def main(paths):
    runs = [json.load(open(p))["rows"] for p in paths]
    names = [r["name"] for r in runs[0] if r["group"] == "attention"]
    print(f"| rows | ratio (median, range over {len(runs)} runs) | against | goal |")
    print("|---|---|---|---|")
    for name in names:
        rows = [next(r for r in run if r["name"] == name) for run in runs]
        ratios = [r["ratio"] for r in rows]
        med = statistics.median(ratios)
        goal = ""
        m = re.search(r"goal >= ([0-9.]+)", rows[0]["note"])
        if m:
            g = float(m.group(1))
            met = sum(x >= g for x in ratios)
            goal = f">= {g}: met in {met} of {len(ratios)} runs"
        print(f"| {name} | {med:.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | {rows[0]['ratio_to']} | {goal} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])

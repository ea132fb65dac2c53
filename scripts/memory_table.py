#!/usr/bin/env python3
"""Markdown table of a `veloxquant bench memory --json` file (MiB; ratio = fp16 bytes / reported).

Usage: memory_table.py results/bench_memory.json [spec ...]   (no specs: every row)
"""
import json
import sys


def main(path, specs):
    d = json.load(open(path))
    rows = {r["spec"]: r for r in d["rows"]}
    mib = 1024.0 * 1024.0
    print(f"{d['heads']} KV heads x {d['tokens']} tokens x D = {d['dim']}, updates of {d['update']}; "
          f"fp16 of every token: {d['rows'][0]['fp16_bytes'] / mib:.1f} MiB")
    print()
    scratch = any("thread_scratch_bytes" in r for r in d["rows"])
    head = "| spec | kept tok | reported | counted | counted / reported | peak RSS | ratio | of which policy |"
    print(head + (" thread scratch |" if scratch else ""))
    print("|---" * (9 if scratch else 8) + "|")
    for spec in specs or list(rows):
        r = rows[spec]
        print(f"| `{spec}` | {int(r['tokens_kept'])} | {r['reported_bytes'] / mib:.2f} | "
              f"{r['counted_bytes'] / mib:.2f} | {r['counted_bytes'] / r['reported_bytes']:.3f} | "
              f"{r['peak_rss_growth_bytes'] / mib:.1f} | {r['fp16_bytes'] / r['reported_bytes']:.2f}x | "
              f"{r['policy_bytes'] / mib:.2f} |" +
              (f" {r.get('thread_scratch_bytes', 0) / mib:.2f} |" if scratch else ""))
    cr = [r["counted_bytes"] / r["reported_bytes"] for r in d["rows"]]
    print()
    print(f"{len(d['rows'])} rows; counted / reported between {min(cr):.3f} and {max(cr):.3f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])

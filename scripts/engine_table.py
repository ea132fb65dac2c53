#!/usr/bin/python3
"""The README's engine table from one `veloxquant bench engine --json FILE` run.

usage: scripts/engine_table.py FILE.json

Prints the run's limits on one line, then a Markdown table with a row per prefill / decode row
of the JSON, in the JSON's order: tok/s over all timed rounds, each round's own range, MB read
per token, the copy bandwidth measured around the row's decode rounds (its local bound), the
bound ratio (FMA peak for prefill, the local copy bandwidth for decode), the ratio to the run's
bound (the largest copy of the run), the read ratio, tok/s over `full`'s at the same context, the
goal and whether the run met it. Files written before the local bounds existed (no
`local_bound_bytes_per_s`) show their single run bound in both columns.
"""
import json
import sys


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def main(path):
    with open(path) as f:
        j = json.load(f)
    lim = j["limits"]
    gb = 1e9
    print(
        f"threads {lim['threads']}, copy {lim['stream_copy_start_bytes_per_s'] / gb:.1f} GB/s "
        f"before the rows and {lim['stream_copy_end_bytes_per_s'] / gb:.1f} after (bound "
        f"{lim['stream_copy_bytes_per_s'] / gb:.1f}), read "
        f"{lim['stream_read_start_bytes_per_s'] / gb:.1f} / "
        f"{lim['stream_read_end_bytes_per_s'] / gb:.1f} GB/s, FMA peak "
        f"{lim['fma_peak_flops_per_s'] / gb:.1f} GFLOP/s ({lim['fma_kernel']}); "
        f"{j.get('rounds', 1)} rounds of {j['decode_steps']} decode steps per method"
    )
    probes = lim.get("stream_copy_probes_bytes_per_s") or []
    if probes:
        print()
        print("copies around the decode groups (GB/s, before / after): " +
              ", ".join(f"{probes[i] / gb:.1f} / {probes[i + 1] / gb:.1f}"
                        for i in range(0, len(probes) - 1, 2)))
    print()
    print("| weights | row | method | context | tok/s | rounds' tok/s | MB read / token | local GB/s "
          "| bound ratio | run ratio | read ratio | vs full | goal | met |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in j["rows"]:
        if "error" in r:
            print(f"| {r['weights']} | {r['kind']} | `{r['method']}` | {r['context']} | "
                  f"error: {r['error']} |" + " - |" * 9)
            continue
        decode = r["kind"] == "decode"
        rounds = r.get("round_tokens_per_s") or []
        spread = f"{min(rounds):.1f}-{max(rounds):.1f}" if rounds else "-"
        mb = fmt(r["bytes_per_token"] / 1e6, ".1f") if decode else "-"
        read = fmt(r.get("read_ratio"), ".3f") if decode else "-"
        vs = fmt(r.get("vs_full"), ".2f") if decode else "-"
        local = r.get("local_bound_bytes_per_s", lim["stream_copy_bytes_per_s"]) if decode else None
        run = r.get("run_bound_ratio", r["bound_ratio"]) if decode else None
        print(f"| {r['weights']} | {r['kind']} | `{r['method']}` | {r['context']} | "
              f"{r['tokens_per_s']:.1f} | {spread} | {mb} | "
              f"{fmt(None if local is None else local / gb, '.1f')} | {r['bound_ratio']:.3f} | "
              f"{fmt(run, '.3f')} | {read} | {vs} | {r['goal']} | "
              f"{'yes' if r['goal_met'] else 'no'} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/engine_table.py FILE.json")
    main(sys.argv[1])

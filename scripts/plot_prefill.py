#!/usr/bin/env python3
"""Plot `veloxquant eval --protocol prefill --json` results: KL against bytes held.

usage: /usr/bin/python3 scripts/plot_prefill.py RESULTS.json [MORE.json ...] OUT.png

One panel per input file: mean KL(full || method) over the continuation (log scale) against the
bytes held per token per layer-head during the continuation (mean over positions). One line per
spec through its compression ratios; a codec alone (no eviction) is a single square. Needs
matplotlib; nothing in the build or the tests imports this file.
"""
import json
import sys


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    inputs, out = argv[1:-1], argv[-1]
    fig, axes = plt.subplots(len(inputs), 1, figsize=(11, 6 * len(inputs)), squeeze=False)
    for row, path in enumerate(inputs):
        with open(path) as f:
            res = json.load(f)
        groups = {}
        for m in res["methods"]:
            if m["spec"] == "full":
                continue
            groups.setdefault(m["spec"], []).append(m)
        ax = axes[row][0]
        colours = plt.get_cmap("tab20").colors
        for i, (spec, ms) in enumerate(sorted(groups.items())):
            ms = sorted(ms, key=lambda m: m["bytes_per_token"])
            xs = [m["bytes_per_token"] for m in ms]
            ys = [max(m["kl_mean"], 1e-6) for m in ms]
            single = len(ms) == 1 and ms[0].get("ratio", 0) == 0
            ax.plot(xs, ys, marker="s" if single else "o", linestyle="none" if single else "-",
                    label=spec, color=colours[i % 20])
        ax.axvline(res["reference"]["bytes_per_token"], color="grey", linestyle=":",
                   label="full (fp16)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("bytes held per token per layer-head (mean over the continuation)")
        ax.set_ylabel("mean KL(full || method), nats")
        ax.set_title("%s, prefill protocol: %d windows, context %d, %d predicted tokens; "
                     "ratios %s" % (res["model"].split("/")[-1], res["windows"], res["context"],
                                    res["predicted_tokens"],
                                    ",".join(str(r) for r in res["ratios"])), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

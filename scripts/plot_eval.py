#!/usr/bin/env python3
"""Plot `veloxquant eval --json` results: quality against compression.

usage: /usr/bin/python3 scripts/plot_eval.py [--stored] RESULTS.json[+MERGED.json] [MORE.json ...] OUT.png

Two panels per input file: mean KL(full || method) (log scale) and top-1 agreement with the full
cache, each against the compression ratio vs fp16 (bytes held per token, averaged over positions).
Methods are grouped by id (the part of the spec before ':'), one colour and line per id, points in
order of compression. `--stored` puts the ratio of fp16 bytes to the bytes in storage form
(`stored_bytes_per_token`: codes, per-chunk parameters, fp16 windows) on the x axis instead of the
resident one. A file from `eval --protocol prefill` gets one panel instead: mean KL over
the continuation against the bytes held per token (log-log), one line per spec through its
compression ratios, a codec alone as a single square. Needs matplotlib; nothing in the build or
the tests imports this file.
"""
import json
import sys


def plot_prefill(plt, ax, res):
    """KL against bytes held for one `eval --protocol prefill` result."""
    groups = {}
    for m in res["methods"]:
        if m["spec"] != "full":
            groups.setdefault(m["spec"], []).append(m)
    colours = plt.get_cmap("tab20").colors
    for i, (spec, ms) in enumerate(sorted(groups.items())):
        ms = sorted(ms, key=lambda m: m["bytes_per_token"])
        single = len(ms) == 1 and ms[0].get("ratio", 0) == 0
        ax.plot([m["bytes_per_token"] for m in ms], [max(m["kl_mean"], 1e-6) for m in ms],
                marker="s" if single else "o", linestyle="none" if single else "-", label=spec,
                color=colours[i % 20])
    ax.axvline(res["reference"]["bytes_per_token"], color="grey", linestyle=":",
               label="full (fp16)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bytes held per token per layer-head (mean over the continuation)")
    ax.set_ylabel("mean KL(full || method), nats")
    ax.set_title("%s, prefill protocol: %d windows, context %d, %d predicted tokens; ratios %s"
                 % (res["model"].split("/")[-1], res["windows"], res["context"],
                    res["predicted_tokens"], ",".join(str(r) for r in res["ratios"])), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def main(argv):
    stored = len(argv) > 1 and argv[1] == "--stored"
    if stored:
        argv = argv[:1] + argv[2:]
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2

    def ratio(m):
        if stored:
            return m["fp16_bytes_per_token"] / m["stored_bytes_per_token"]
        return m["compression_ratio"]

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # a '+' between files merges them into one row (e.g. eviction+transform runs of one model)
    inputs, out = argv[1:-1], argv[-1]
    fig, axes = plt.subplots(len(inputs), 2, figsize=(15, 5 * len(inputs)), squeeze=False)
    transform_ids = {"kvtc", "uniform", "svdq_split", "q8_0", "q4_0", "svdq", "palu",
                     "spectralquant", "gear", "kivi"}
    for row, path in enumerate(inputs):
        parts = path.split("+")
        with open(parts[0]) as f:
            res = json.load(f)
        if res.get("protocol") == "prefill":
            axes[row][1].set_visible(False)
            plot_prefill(plt, axes[row][0], res)
            continue
        for extra_path in parts[1:]:
            with open(extra_path) as f:
                more = json.load(f)
            res["methods"] += [m for m in more["methods"] if m["spec"] != "full"]
        groups = {}
        for m in res["methods"]:
            spec = m["spec"]
            if spec == "full":
                continue
            key = spec.split(":")[0]
            opts = spec.split(":", 1)[1] if ":" in spec else ""
            # variants that are not a budget sweep get their own line
            kv = dict(o.split("=", 1) for o in opts.split(",") if "=" in o)
            extra = []
            for o in opts.split(","):
                # the swept quantities (budget, bits) are the x axis, not a variant
                if not o or o.startswith(("budget=", "bit_budget=", "bits=", "signal_bits=",
                                          "noise_bits=")):
                    continue
                name, _, val = o.partition("=")
                if name == "basis" and val != "local":  # a calibration file: its path is noise
                    o = "basis=calibrated"
                # a window that scales with the budget is one variant, not one per budget
                if name in ("recent", "window") and "budget" in kv and val.isdigit() and \
                        int(val) * 2 == int(kv["budget"]):
                    o = name + "=budget/2"
                extra.append(o)
            if extra:
                key += " (" + ",".join(extra) + ")"
            groups.setdefault(key, []).append(m)
        title = "%s: %d windows, %d predicted tokens" % (
            res["model"].split("/")[-1], res["windows"], res["predicted_tokens"])
        for col, (field, label, log) in enumerate(
                [("kl_mean", "mean KL(full || method), nats", True),
                 ("top1_agreement", "top-1 agreement with full", False)]):
            ax = axes[row][col]
            colours = plt.get_cmap("tab20").colors
            for i, (key, ms) in enumerate(sorted(groups.items())):
                ms = sorted(ms, key=ratio)
                xs = [ratio(m) for m in ms]
                ys = [max(m[field], 1e-6) if log else m[field] for m in ms]
                # eviction: circles and solid lines; transform: squares and dashed lines
                is_tr = key.split(" ")[0] in transform_ids
                ax.plot(xs, ys, marker="s" if is_tr else "o", linestyle="--" if is_tr else "-",
                        label=key, color=colours[(2 * i) % 20 + (i // 10) % 2])
            if log:
                ax.set_yscale("log")
            ax.set_xlabel("ratio vs fp16 (mean %s bytes per token)" % (
                "stored" if stored else "resident"))
            ax.set_ylabel(label)
            ax.set_title(title, fontsize=9)
            ax.grid(True, alpha=0.3)
            if col == 1:  # one legend per row, outside the axes
                ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

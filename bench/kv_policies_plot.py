#!/usr/bin/python3
"""PNG plot of tessera_kv_policies_bench's JSON (one or more files, merged):
for each model, perplexity per 1000-token segment against the position in
the stream, one line per policy at one budget (dense at full length too),
and KV bytes against position.

  bench/kv_policies_plot.py --budget 128 -o docs/kv_policies.png run1.json [run2.json ...]

Needs Debian's python3-matplotlib (apt-get install python3-matplotlib): run
with /usr/bin/python3, which sees Debian's packages.
"""
import argparse
import json
import sys

try:
    import matplotlib
except ImportError:
    sys.exit("kv_policies_plot.py needs python3-matplotlib: apt-get install python3-matplotlib "
             "(and run it with /usr/bin/python3)")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"dense": ("black", "-"), "window": ("tab:red", "-"), "sink": ("tab:blue", "-"),
         "recompute": ("tab:gray", "--"), "h2o": ("tab:green", "-"), "spatten": ("tab:purple", "-")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--budget", type=int, default=128)
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    runs = []
    for f in a.files:
        with open(f) as fh:
            runs += [r for r in json.load(fh)["runs"] if r.get("granularity", 0) == 0]
    models = []
    for r in runs:
        if r["model"] not in models:
            models.append(r["model"])
    fig, axes = plt.subplots(2, len(models), figsize=(6.5 * len(models), 8), squeeze=False)
    for col, m in enumerate(models):
        ax_ppl, ax_kv = axes[0][col], axes[1][col]
        name = m.split("/")[-1]
        seen = set()
        default_recent = {"h2o": a.budget // 2, "spatten": a.budget // 4}
        for r in runs:
            if r["model"] != m or (r["policy"] != "dense" and r["budget"] != a.budget):
                continue
            key = (r["policy"], r.get("recent", 0))
            if key in seen:
                continue
            seen.add(key)
            color, ls = STYLE.get(r["policy"], ("tab:orange", "-"))
            variant = r.get("recent", 0) not in (0, default_recent.get(r["policy"], 0))
            if variant:
                ls = ":"
            seg = r["segment"]
            x = [(i + 1) * seg for i in range(len(r["segment_ppl"]))]
            name_r = f"{r['policy']}, recent {r['recent']}" if variant else r["policy"]
            label = f"{name_r} (ppl {r['ppl']:.2f})"
            ax_ppl.plot(x, r["segment_ppl"], color=color, linestyle=ls, label=label)
            if r["segment_kv_bytes"]:
                ax_kv.plot(x, [b / 1024 for b in r["segment_kv_bytes"]], color=color, linestyle=ls,
                           label=name_r)
        ctx = next(r["n_ctx_train"] for r in runs if r["model"] == m)
        ax_ppl.set_yscale("log")
        ax_ppl.set_title(f"{name} (context in the file: {ctx}), budget {a.budget}")
        ax_ppl.set_xlabel("position in the stream (tokens)")
        ax_ppl.set_ylabel("perplexity of each 1000 tokens (log)")
        ax_ppl.legend(fontsize=8)
        ax_ppl.grid(True, which="both", alpha=0.3)
        ax_kv.set_yscale("log")
        ax_kv.set_xlabel("position in the stream (tokens)")
        ax_kv.set_ylabel("KV cache held (KiB, f16, log)")
        ax_kv.legend(fontsize=8)
        ax_kv.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(a.out, dpi=90)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

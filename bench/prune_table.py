"""The pruning table of docs/BENCHMARKS.md (issue 42): magnitude against
Wanda at 30/50/60% unstructured and 2:4, on the first 100 000 bytes of
../shared/data/tinystories_val_prefix.txt at context 128, Wanda calibrated
on the last 90 000 bytes of the same file (never the evaluated text). Each
pruned model is stored in F32 (the zeros kept: the pruning alone is judged)
and, at 50% and 2:4, also as SP_Q8_0 (the sparse storage the decode kernels
read; its rounding adds to the pruning). Judged by `tessera perplexity --kl`
against the dense F32 model's saved base: ppl ratio and mean KLD.
The mixture (models/stories-moe) prunes its attention only: experts stay
dense (quant/prune.h). Contextual sparsity (`prune --sparsity 0
--ffn-sparsity S`: no weight pruned, S of each token's FFN neurons skipped,
thresholds calibrated on the same calibration text) at 30% and 50%, in F32,
with the recall the calibration measured (dense FFNs only: not the mixture).

usage: python3 bench/prune_table.py [BUILD_DIR] [--models 260K,1M,moe] [--json OUT]
           [--parts weights,contextual]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(ROOT, "..", "shared")
MODELS = {"260K": os.path.join(SHARED, "models/stories260K/stories260K.gguf"),
          "1M": os.path.join(SHARED, "models/stories1M/stories1M.gguf"),
          "moe": os.path.join(ROOT, "models/stories-moe/stories-moe-8x.gguf")}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--models", default="260K,1M,moe")
    ap.add_argument("--json")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--parts", default="weights,contextual")
    a = ap.parse_args()
    tessera = os.path.join(ROOT, a.build, "tessera")
    tmp = tempfile.mkdtemp(prefix="prune_table_")
    text = open(os.path.join(SHARED, "data/tinystories_val_prefix.txt"), "rb").read()
    evalf, calibf = os.path.join(tmp, "eval.txt"), os.path.join(tmp, "calib.txt")
    open(evalf, "wb").write(text[:100000])
    open(calibf, "wb").write(text[-90000:])
    ppl = lambda m, extra: json.loads(run([tessera, "perplexity", "-m", m, "-f", evalf, "-c", "128", "-t", a.threads,
                                           "--json"] + extra))
    results = []
    for key in a.models.split(","):
        model = MODELS[key]
        if not os.path.exists(model):
            print(f"(no {model}: {key} left out)", file=sys.stderr)
            continue
        base = os.path.join(tmp, f"{key}.klbase")
        dense = ppl(model, ["--kl-base", base])
        results.append({"model": key, "method": "dense", "sparsity": "0%", "type": "F32", "ppl": dense["ppl"],
                        "ppl_ratio": 1.0, "kld": 0.0, "same_top": 1.0, "bytes": os.path.getsize(model)})
        points = [("30%", ["--sparsity", "0.3"]), ("50%", ["--sparsity", "0.5"]), ("60%", ["--sparsity", "0.6"]),
                  ("2:4", ["--nm", "2:4"])] if "weights" in a.parts else []
        for label, opt in points:
            types = ["f32"] + (["sp_q8_0"] if label in ("50%", "2:4") else [])
            for ty in types:
                for method in ("magnitude", "wanda"):
                    out = os.path.join(tmp, f"{key}-{method}-{label.replace(':', '_')}-{ty}.gguf")
                    run([tessera, "prune", "-m", model, "-o", out, "--method", method, "--type", ty, "--calib", calibf,
                         "--calib-tokens", "50000", "-t", a.threads] + opt)
                    k = ppl(out, ["--kl", base])
                    row = {"model": key, "method": method, "sparsity": label, "type": ty.upper(), "ppl": k["ppl"],
                           "ppl_ratio": k["ppl_ratio"], "kld": k["kld_mean"], "same_top": k["same_top"],
                           "bytes": os.path.getsize(out)}
                    results.append(row)
                    print(json.dumps(row), file=sys.stderr)
        for label in (("30%", "50%") if "contextual" in a.parts and key != "moe" else ()):
            out = os.path.join(tmp, f"{key}-contextual-{label[:2]}.gguf")
            said = run([tessera, "prune", "-m", model, "-o", out, "--sparsity", "0", "--type", "f32", "--ffn-sparsity",
                        str(int(label[:2]) / 100), "--calib", calibf, "--calib-tokens", "50000", "-t", a.threads])
            recall = float(re.search(r"recall ([0-9.]+)", said).group(1))
            k = ppl(out, ["--kl", base])
            row = {"model": key, "method": "contextual", "sparsity": label, "type": "F32", "ppl": k["ppl"],
                   "ppl_ratio": k["ppl_ratio"], "kld": k["kld_mean"], "same_top": k["same_top"],
                   "bytes": os.path.getsize(out), "recall": recall}
            results.append(row)
            print(json.dumps(row), file=sys.stderr)
    if a.json:
        json.dump(results, open(a.json, "w"), indent=1)
    print("| model | sparsity | storage | method | ppl | ppl ratio | mean KLD | same top | file | recall |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        recall = f"{r['recall']:.3f}" if "recall" in r else ""
        print(f"| {r['model']} | {r['sparsity']} | {r['type']} | {r['method']} | {r['ppl']:.4f} | {r['ppl_ratio']:.4f} "
              f"| {r['kld']:.4f} | {100 * r['same_top']:.1f}% | {r['bytes'] / 1e6:.3f} MB | {recall} |")


if __name__ == "__main__":
    main()

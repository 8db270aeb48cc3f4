"""QuaRot and W4A8 quality (issue 36): perplexity, its ratio to F32, and mean
KL divergence from F32 on the first 100 000 bytes of
../shared/data/tinystories_val_prefix.txt at context 128 (every chunk, f16
KV cache), for stories260K, stories1M and the trained mixture (MoE, on request), of: the rotated F32 model
(invariance), Q4_0 and W4A8 by rounding, by GPTQ, by QuaRot then rounding
and by QuaRot then GPTQ, and W8A8 with and without the rotation. Every
file is made by `tessera quantize` from the F32 original (GPTQ calibrated
on the built-in calibration text).

usage: python3 bench/quarot_table.py [BUILD_DIR] [--models 260K,1M,MoE] [--json OUT]
Prints the docs/results JSON (docs/results/quarot_quality.json).
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

from kv_quant_table import MODELS, ROOT, SHARED, run  # the same models, paths and runner
# and the trained mixture that ships in the repository (models/stories-moe/PROVENANCE.md)
MODELS = dict(MODELS, MoE=os.path.join(ROOT, "models/stories-moe/stories-moe-8x.gguf"))
# (label, --type, --method): None for the F32 original.
CONFIGS = [("F32", None, None), ("rotated F32", "f32", "quarot"),
           ("Q4_0 rtn", "q4_0", "rtn"), ("Q4_0 gptq", "q4_0", "gptq"), ("Q4_0 quarot", "q4_0", "quarot"),
           ("Q4_0 quarot+gptq", "q4_0", "quarot+gptq"),
           ("W4A8 rtn", "w4a8", "rtn"), ("W4A8 gptq", "w4a8", "gptq"), ("W4A8 quarot", "w4a8", "quarot"),
           ("W4A8 quarot+gptq", "w4a8", "quarot+gptq"),
           ("W8A8 rtn", "w8a8", "rtn"), ("W8A8 quarot", "w8a8", "quarot")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default="260K,1M")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--json", help="also write the JSON here")
    a = ap.parse_args()
    tessera = os.path.join(a.build, "tessera")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "eval.txt")
        with open(os.path.join(SHARED, "data/tinystories_val_prefix.txt"), "rb") as f:
            data = f.read(100000)
        with open(text, "wb") as f:
            f.write(data)
        for name in a.models.split(","):
            src, kl = MODELS[name], os.path.join(tmp, name + ".kl")
            run([tessera, "perplexity", "-m", src, "-f", text, "-c", "128", "-t", a.threads, "--kl-base", kl])
            for label, typ, method in CONFIGS:
                model = src
                if typ is not None:
                    model = os.path.join(tmp, f"{name}-{typ}-{method}.gguf")
                    run([tessera, "quantize", "-m", src, "-o", model, "--type", typ, "--method", method, "-t", a.threads])
                r = json.loads(run([tessera, "perplexity", "-m", model, "-f", text, "-c", "128", "-t", a.threads,
                                    "--kl", kl, "--json"]))
                rows.append({"model": name, "method": label, "ppl": round(r["ppl"], 4),
                             "ratio": round(r["ppl_ratio"], 4), "kld": round(r["kld_mean"], 5),
                             "top": round(100.0 * r["same_top"], 2)})
                print(json.dumps(rows[-1]), file=sys.stderr)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    out = {"meta": {"date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
                    "cpu": "", "commit": commit,
                    "command": ["python3 bench/quarot_table.py build --json docs/results/quarot_quality.json"],
                    "log_section": "QuaRot and W4A8 (issue 36)", "note": ""},
           "columns": [{"key": "model", "title": "model", "fmt": "s"},
                       {"key": "method", "title": "weights", "fmt": "s"},
                       {"key": "ppl", "title": "ppl", "fmt": "4f"},
                       {"key": "ratio", "title": "ppl ratio", "fmt": "4f"},
                       {"key": "kld", "title": "mean KLD", "fmt": "5f"},
                       {"key": "top", "title": "same top token %", "fmt": "2f"}],
           "rows": rows}
    s = json.dumps(out, indent=1)
    print(s)
    if a.json:
        with open(a.json, "w") as f:
            f.write(s + "\n")


if __name__ == "__main__":
    main()

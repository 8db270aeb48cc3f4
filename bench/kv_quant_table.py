"""The quantized KV cache table (issue 36): perplexity and mean KL divergence
of each KV cache type against the f16 cache, on the first 100 000 bytes of
../shared/data/tinystories_val_prefix.txt at context 128 (every chunk), for
stories260K and stories1M: f16, q8_0 and q4_0, each with and without the
Hadamard rotation (--kv-hadamard), and q8_0 / q4_0 again on the model with
its key means (`tessera quantize --center-keys`, docs/KV_CACHE.md). With --peer BIN (a llama.cpp or
ik_llama.cpp bin folder), the peer's llama-perplexity on the same file and
text with -ctk/-ctv of the same types (flash attention on, as a quantized V
cache needs; ik_llama.cpp's -khad, which rotates K only) goes beside.

usage: python3 bench/kv_quant_table.py [BUILD_DIR] [--models 260K,1M] [--json OUT] [--peer BIN]
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
          "1M": os.path.join(SHARED, "models/stories1M/stories1M.gguf")}
HEAD_DIM = {"260K": 8, "1M": 16}


def bytes_per_value(kv, head_dim):
    """A cache's bytes per K or V value: codes, plus an fp16 scale per block
    of 32 features (or per head when head_dim is not a multiple of 32)."""
    if kv == "f16":
        return 2.0
    block = 32 if head_dim % 32 == 0 else head_dim
    return (1.0 if kv == "q8_0" else 0.5) + 2.0 / block
# (type, Hadamard, centered keys)
CONFIGS = [("f16", False, False), ("q8_0", False, False), ("q8_0", True, False), ("q4_0", False, False),
           ("q4_0", True, False), ("q8_0", True, True), ("q4_0", False, True), ("q4_0", True, True)]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout


def peer_ppl(bin_dir, model, text, kv, hadamard, threads):
    """The peer's final estimate, or why it has none."""
    cmd = [os.path.join(bin_dir, "llama-perplexity"), "-m", model, "-f", text, "-c", "128", "-b", "128", "-t", threads,
           "-ctk", kv, "-ctv", kv, "-fa", "on"]
    if hadamard:
        cmd.append("-khad")
    r = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"Final estimate: PPL.* = ([0-9.]+)", r.stdout + r.stderr)
    if r.returncode == 0 and m:
        return float(m.group(1))
    failed = re.search(r"GGML_ASSERT\((.*)\) failed", r.stdout + r.stderr)
    return "aborts: " + (failed.group(1) if failed else f"exit {r.returncode}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--models", default="260K,1M")
    ap.add_argument("--json")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--peer", help="bin folder of a native llama.cpp / ik_llama.cpp build")
    a = ap.parse_args()
    tessera = os.path.join(ROOT, a.build, "tessera")
    tmp = tempfile.mkdtemp(prefix="kv_quant_table_")
    text = open(os.path.join(SHARED, "data/tinystories_val_prefix.txt"), "rb").read()
    evalf = os.path.join(tmp, "eval.txt")
    open(evalf, "wb").write(text[:100000])
    results = []
    for key in a.models.split(","):
        model = MODELS[key]
        base = os.path.join(tmp, f"{key}.klbase")
        centered = os.path.join(tmp, f"{key}.centered.gguf")
        run([tessera, "quantize", "-m", model, "-o", centered, "--method", "rtn", "--type", "f32", "--center-keys"])
        for kv, hadamard, center in CONFIGS:
            cmd = [tessera, "perplexity", "-m", centered if center else model, "-f", evalf, "-c", "128", "-t", a.threads, "--json",
                   "--kv-type", kv] + (["--kv-hadamard"] if hadamard else [])
            first = kv == "f16"
            r = json.loads(run(cmd + (["--kl-base", base] if first else ["--kl", base])))
            if first:
                f16 = r["ppl"]
            row = {"model": key, "kv": kv + (" + Hadamard" if hadamard else "") + (" + centered keys" if center else ""),
                   "bytes_per_value": bytes_per_value(kv, HEAD_DIM[key]), "ppl": r["ppl"],
                   "ppl_ratio": r["ppl"] / f16,
                   "kld": 0.0 if first else r["kld_mean"], "same_top": 1.0 if first else r["same_top"]}
            if a.peer and not center:  # the peer ignores tessera.kv.key_mean
                p = peer_ppl(a.peer, model, evalf, kv, hadamard, a.threads)
                row["peer_ppl"] = p
            results.append(row)
            print(json.dumps(row), file=sys.stderr)
    out = {"results": results, "threads": int(a.threads), "peer": a.peer}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

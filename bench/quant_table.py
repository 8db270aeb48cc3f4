"""The quantization table of docs/BENCHMARKS.md: Tessera's RTN, AWQ, GPTQ
and AWQ+GPTQ at 4 and 3 bits beside llama.cpp's own quantizer, on the first
100 000 bytes of ../shared/data/tinystories_val_prefix.txt at context 128,
calibrated on the last 90 000 bytes of the same file (never the evaluated
text). Tessera files are judged by `tessera perplexity --kl` against the F32
model's saved base; llama.cpp's files by llama.cpp itself (node-llama-cpp's
full next-token distributions, bench/llamacpp_probs.mjs, against the F32
model's through the same path; bench/llamacpp_kl.py), since its K-quant
fallbacks (Q5_0, Q5_1) are types Tessera does not load. llama.cpp's Q4_0 is
judged both ways as a cross-check.

usage: /usr/bin/python3 bench/quant_table.py [BUILD_DIR] [--models 260K,1M] [--json OUT] [--skip-tessera]
Needs bench/peer (bench/setup_peer) for the llama.cpp rows; without it they
are left out and the table says so.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(ROOT, "..", "shared")
MODELS = {"260K": "models/stories260K/stories260K.gguf", "1M": "models/stories1M/stories1M.gguf"}
PEER_LIB = os.path.join(HERE, "peer/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64")

def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout


SIZES = {"F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22),
         "Q5_1": (32, 24), "Q8_0": (32, 34), "Q2_K": (256, 84), "Q3_K": (256, 110), "Q4_K": (256, 144),
         "Q5_K": (256, 176), "Q6_K": (256, 210), "IQ4_NL": (32, 18)}


def matrix_stats(tessera, path):
    """(bits per matrix weight, file bytes, {type: count}) of a GGUF: stored
    bytes of every 2-D tensor over its true number of weights (a padded
    matrix counts its padding as cost)."""
    info = run([tessera, "info", "-m", path, "--tensors"])
    padded = {}
    for line in info.splitlines():
        if line.startswith("tessera.padded_cols."):
            name, value = line[len("tessera.padded_cols."):].split(" = ")
            padded[name] = int(value)
    bits = n = 0
    types = {}
    for line in info.splitlines():
        parts = line.split()
        if len(parts) != 4 or not parts[2].startswith("["):
            continue
        name, ty = parts[0], parts[1]
        dims = [int(d) for d in (parts[2] + parts[3]).strip("[]").split(",")]
        if len(dims) != 2:
            continue
        block, size = SIZES[ty]
        bits += 8 * dims[0] // block * size * dims[1]
        n += padded.get(name, dims[0]) * dims[1]
        types[ty] = types.get(ty, 0) + 1
    return bits / n, os.path.getsize(path), types


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--models", default="260K,1M")
    ap.add_argument("--json")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--skip-tessera", action="store_true", help="only the F32 and llama.cpp rows")
    ap.add_argument("--llamacpp-types", default="Q8_0,Q4_0,Q4_K_M,Q4_K_S,Q3_K_M,Q3_K_S")
    a = ap.parse_args()
    tessera = os.path.join(ROOT, a.build, "tessera")
    tmp = tempfile.mkdtemp(prefix="quant_table_")
    text = open(os.path.join(SHARED, "data/tinystories_val_prefix.txt"), "rb").read()
    evalf, calibf = os.path.join(tmp, "eval.txt"), os.path.join(tmp, "calib.txt")
    open(evalf, "wb").write(text[:100000])
    open(calibf, "wb").write(text[-90000:])
    peer = os.path.isdir(PEER_LIB)
    results = []
    for key in a.models.split(","):
        model = os.path.join(SHARED, MODELS[key])
        base = os.path.join(tmp, f"{key}.klbase")
        out = json.loads(run([tessera, "perplexity", "-m", model, "-f", evalf, "-c", "128", "-t", a.threads,
                              "--kl-base", base, "--json"]))
        bpw, size, types = matrix_stats(tessera, model)
        results.append({"model": key, "who": "—", "what": "F32", "bpw": bpw, "bytes": size, "ppl": out["ppl"],
                        "ppl_ratio": 1.0, "kld": 0.0, "same_top": 1.0, "types": types})
        configs = []
        for bits in (4, 3):
            for method in ("rtn", "awq", "gptq", "awq+gptq"):
                configs.append((f"{method} {bits}-bit, every matrix", method, ["--type", "q4_0", "--bits", str(bits)]))
        if key == "260K":
            # llama.cpp's Q4_0 mix on this model: output Q8_0, ffn_down F16 (172 columns).
            mix = ["--keep", "output.weight=q8_0"] + sum((["--keep", f"blk.{i}.ffn_down.weight=f16"] for i in range(5)), [])
        else:
            # Tied output: llama.cpp stores token_embd (the output matrix) in Q8_0.
            mix = ["--keep", "token_embd.weight=q8_0"]
        for method in ("rtn", "awq", "gptq", "awq+gptq"):
            configs.append((f"{method} 4-bit, llama.cpp's Q4_0 mix", method, ["--type", "q4_0"] + mix))
        for method in ("rtn", "awq", "gptq", "awq+gptq"):
            # Q4_K rows must be 256 wide: these models' matrices are padded (the cost is in bpw).
            configs.append((f"{method} Q4_K, every matrix", method, ["--type", "q4_k"]))
        for method in ("rtn", "awq", "gptq", "awq+gptq"):
            configs.append((f"{method} Q3_K, every matrix", method, ["--type", "q3_k"]))
        configs.append(("rtn 8-bit", "rtn", ["--type", "q8_0"]))
        for what, method, extra in ([] if a.skip_tessera else configs):
            qf = os.path.join(tmp, f"{key}-{method}-{len(results)}.gguf")
            run([tessera, "quantize", "-m", model, "-o", qf, "--method", method, "--calib", calibf,
                 "--calib-tokens", "50000", "-t", a.threads] + extra)
            k = json.loads(run([tessera, "perplexity", "-m", qf, "-f", evalf, "-c", "128", "-t", a.threads,
                                "--kl", base, "--json"]))
            bpw, size, types = matrix_stats(tessera, qf)
            results.append({"model": key, "who": "Tessera", "what": what, "bpw": bpw, "bytes": size, "ppl": k["ppl"],
                            "ppl_ratio": k["ppl_ratio"], "kld": k["kld_mean"], "same_top": k["same_top"],
                            "types": types})
            print(json.dumps(results[-1]), file=sys.stderr)
        if not peer:
            continue
        tok = os.path.join(tmp, f"{key}.tok")
        open(tok, "w").write(run([tessera, "tokenize", "-m", model, "-f", evalf, "--bos"]))
        bos = int(open(tok).read().strip("[] \n").split(",")[0])
        n_vocab = int(run([tessera, "info", "-m", model]).split("tokenizer.ggml.tokens = [")[1].split()[0])
        probs = lambda f, o: run(["node", os.path.join(HERE, "llamacpp_probs.mjs"), f, tok, "128", str(bos), o,
                                  a.threads], cwd=os.path.join(HERE, "peer"))
        base_probs = os.path.join(tmp, f"{key}-f32.probs")
        probs(model, base_probs)
        ftypes = {"Q8_0": 7, "Q4_0": 2, "Q4_K_M": 15, "Q4_K_S": 14, "Q3_K_M": 12, "Q3_K_S": 11}
        for name in a.llamacpp_types.split(","):
            ftype = ftypes[name]
            qf = os.path.join(tmp, f"{key}-llamacpp-{name}.gguf")
            run(["/usr/bin/python3", os.path.join(HERE, "llamacpp_quantize.py"), model, qf, str(ftype), a.threads])
            qp = qf + ".probs"
            probs(qf, qp)
            k = json.loads(run(["/usr/bin/python3", os.path.join(HERE, "llamacpp_kl.py"), base_probs, qp, tok, "128",
                                str(n_vocab)]))
            bpw, size, types = matrix_stats(tessera, qf)
            row = {"model": key, "who": "llama.cpp", "what": f"{name} (no imatrix)", "bpw": bpw, "bytes": size,
                   "ppl": k["ppl"], "ppl_ratio": k["ppl_ratio"], "kld": k["kld_mean"], "same_top": k["same_top"],
                   "types": types}
            if name == "Q4_0":  # the same file judged by Tessera
                t = json.loads(run([tessera, "perplexity", "-m", qf, "-f", evalf, "-c", "128", "-t", a.threads,
                                    "--kl", base, "--json"]))
                row["tessera_judged"] = {"ppl": t["ppl"], "ppl_ratio": t["ppl_ratio"], "kld": t["kld_mean"],
                                         "same_top": t["same_top"]}
            results.append(row)
            print(json.dumps(row), file=sys.stderr)
    if a.json:
        json.dump(results, open(a.json, "w"), indent=1)
    print("| model | quantizer | method / type | bits/weight | file | ppl | ppl ratio | mean KLD | same top | matrix types |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        types = ", ".join(f"{n} {t}" for t, n in sorted(r["types"].items()))
        print(f"| {r['model']} | {r['who']} | {r['what']} | {r['bpw']:.2f} | {r['bytes'] / 1e6:.3f} MB | {r['ppl']:.4f} "
              f"| {r['ppl_ratio']:.4f} | {r['kld']:.4f} | {100 * r['same_top']:.1f}% | {types} |")
    if not peer:
        print("\n(no llama.cpp peer in bench/peer: its rows are left out)")


if __name__ == "__main__":
    main()

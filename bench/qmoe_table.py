"""QMoE's table (docs/QUANTIZATION.md, issue 34): a mixture's experts as
QMoE ternary codes, by rounding and by GPTQ, beside the same experts rounded
to 8, 4, 3 and 2 bits (values in Q8_0 / Q4_0 blocks) and 2-bit GPTQ; every
other matrix stays F16, so the rows differ in the experts only. Judged by
`tessera perplexity --kl` against the unquantized model's saved base: ppl,
ppl ratio, mean KL divergence and same-top rate, with each file's expert bits
per weight as stored (QMoE: dictionary, scales and offsets included).

The evaluated text is the last 40 000 bytes of
../shared/data/tinystories_val_prefix.txt, which models/stories-moe was
validated on and never trained on (its PROVENANCE.md: trained on the first
90% of the tokens); GPTQ calibrates on Tessera's built-in stories
(src/quant/default_calibration.cc), neither training nor evaluation text.

usage: /usr/bin/python3 bench/qmoe_table.py [--build build] [--model GGUF] [--ctx 256] [--json OUT]
Default model: models/stories-moe/stories-moe-8x.gguf. A random mixture
works too (its perplexities then mean nothing; its bits do).
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


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout


def expert_bits(stdout):
    """Expert bits per weight from `tessera quantize`'s report."""
    for line in stdout.splitlines():
        if line.startswith("experts:"):
            return float(line.split(" at ")[1].split()[0])
    sys.exit("quantize did not report the experts' bits")


def configs():
    c = [("Q8_0 RTN", ["--method", "rtn", "--type", "f16", "--experts-type", "q8_0"]),
         ("Q4_0 RTN (4-bit)", ["--method", "rtn", "--type", "f16", "--experts-type", "q4_0"])]
    for bits in (3, 2):
        c.append((f"{bits}-bit RTN (Q4_0 blocks)", ["--method", "rtn", "--type", "f16", "--experts-type", "q4_0",
                                                      "--bits", str(bits)]))
    c.append(("2-bit GPTQ (Q4_0 blocks)", ["--method", "gptq", "--type", "f16", "--experts-type", "q4_0",
                                            "--bits", "2"]))
    c.append(("QMoE RTN", ["--method", "qmoe-rtn", "--type", "f16"]))
    c.append(("QMoE GPTQ, damp 0.01 (GPTQ's usual)", ["--method", "qmoe", "--type", "f16", "--damp", "0.01"]))
    c.append(("QMoE GPTQ (damp 0.5, the default)", ["--method", "qmoe", "--type", "f16"]))
    c.append(("QMoE GPTQ, damp 1.0", ["--method", "qmoe", "--type", "f16", "--damp", "1.0"]))
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models/stories-moe/stories-moe-8x.gguf"))
    ap.add_argument("--ctx", default="256")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--json")
    a = ap.parse_args()
    tessera = os.path.join(a.build, "tessera")
    tmp = tempfile.mkdtemp(prefix="qmoe-table-")
    evalf = os.path.join(tmp, "eval.txt")
    open(evalf, "wb").write(open(os.path.join(SHARED, "data/tinystories_val_prefix.txt"), "rb").read()[-40000:])
    base = os.path.join(tmp, "base.kl")
    ref = json.loads(run([tessera, "perplexity", "-m", a.model, "-f", evalf, "-c", a.ctx, "-t", a.threads,
                          "--kl-base", base, "--json"]))
    rows = [{"what": "unquantized (F16 as trained)", "expert_bpw": 16.0, "ppl": ref["ppl"], "ppl_ratio": 1.0,
             "kld": 0.0, "same_top": 1.0}]
    print(json.dumps(rows[-1]), file=sys.stderr)
    for what, extra in configs():
        qf = os.path.join(tmp, f"q{len(rows)}.gguf")
        out = run([tessera, "quantize", "-m", a.model, "-o", qf, "-t", a.threads, "--calib-tokens", "50000"] + extra)
        k = json.loads(run([tessera, "perplexity", "-m", qf, "-f", evalf, "-c", a.ctx, "-t", a.threads, "--kl", base,
                            "--json"]))
        rows.append({"what": what, "expert_bpw": expert_bits(out), "ppl": k["ppl"], "ppl_ratio": k["ppl_ratio"],
                     "kld": k["kld_mean"], "same_top": k["same_top"]})
        print(json.dumps(rows[-1]), file=sys.stderr)
    version = run([tessera, "--version"]).strip() if os.path.exists(tessera) else "?"
    result = {"bench": "qmoe_table", "model": os.path.relpath(a.model, ROOT), "ctx": int(a.ctx),
              "eval": "tinystories_val_prefix.txt, last 40000 bytes", "tessera": version, "rows": rows}
    text = json.dumps(result, indent=1)
    print(text)
    if a.json:
        open(a.json, "w").write(text + "\n")
    print("\n| experts | bits per expert weight | ppl | ppl ratio | mean KLD | same top |", file=sys.stderr)
    print("|---|---|---|---|---|---|", file=sys.stderr)
    for r in rows:
        print(f"| {r['what']} | {r['expert_bpw']:.3f} | {r['ppl']:.4f} | {r['ppl_ratio']:.4f} | {r['kld']:.5f} | "
              f"{100 * r['same_top']:.1f}% |", file=sys.stderr)


if __name__ == "__main__":
    main()

"""Decode and prompt speed of sparse models against their dense twins
(issue 42), alternating in the same run: for each pair DENSE=SPARSE,
`tessera bench --json` on each in turn, ROUNDS times; prints one JSON
object with every sample, the per-round ratios (sparse / dense) and their
median, min and max, the bytes read per token, the weight sparsity (pruned
files) and the FFN neurons skipped (contextual sparsity). With --batched
1,8 the decode of B sequences at once is compared too (`tessera bench
--batched`: decode tokens/s summed over the sequences).

usage: python3 bench/sparse_decode.py [--build build] [--rounds 4] [--threads 2]
           [--pp 512] [--tg 128] [--batched 1,8] DENSE.gguf=SPARSE.gguf ...
The models come from `tessera quantize` / `tessera prune` (docs/BENCHMARKS.md
gives the commands).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench(tessera, model, threads, pp, tg):
    cmd = [tessera, "bench", "-m", model, "-t", str(threads), "-p", str(pp), "-n", str(tg), "-r", "3", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return json.loads(r.stdout)


def batched(tessera, model, threads, sizes, tg):
    cmd = [tessera, "bench", "-m", model, "-t", str(threads), "-p", "16", "-n", str(tg), "-r", "2", "--json",
           "--no-membw", "--batched", sizes]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return {row["batch"]: row["tg_tps"] for row in json.loads(r.stdout)["batched"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pairs", nargs="+", help="DENSE.gguf=SPARSE.gguf")
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--batched", default="", help="batch sizes for a batched decode comparison, e.g. 1,8")
    a = ap.parse_args()
    tessera = os.path.join(ROOT, a.build, "tessera")
    out = {"threads": a.threads, "pp": a.pp, "tg": a.tg, "rounds": a.rounds,
           "cpu": subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True,
                                 text=True).stdout.strip(), "pairs": []}
    for pair in a.pairs:
        dense, sparse = pair.split("=")
        rows = {"dense": [], "sparse": []}
        brows = {"dense": [], "sparse": []}
        for _ in range(a.rounds):
            for kind, model in (("dense", dense), ("sparse", sparse)):
                rows[kind].append(bench(tessera, model, a.threads, a.pp, a.tg))
                if a.batched:
                    brows[kind].append(batched(tessera, model, a.threads, a.batched, min(a.tg, 64)))
        res = {"dense": os.path.basename(dense), "sparse": os.path.basename(sparse),
               "bytes_per_token": {k: rows[k][0]["bytes_per_token"] for k in rows},
               "weight_sparsity": rows["sparse"][0].get("weight_sparsity", 0.0)}
        if "ffn_sparsity" in rows["sparse"][0]:
            res["ffn_sparsity"] = [r["ffn_sparsity"] for r in rows["sparse"]]
            res["bytes_per_token"]["sparse"] = rows["sparse"][0]["bytes_per_token_read"]
        res["bytes_ratio"] = res["bytes_per_token"]["sparse"] / res["bytes_per_token"]["dense"]
        if a.batched:
            res["batched"] = {}
            for b in brows["dense"][0]:
                d = [r[b] for r in brows["dense"]]
                s_ = [r[b] for r in brows["sparse"]]
                ratios = [y / x for x, y in zip(d, s_)]
                res["batched"][str(b)] = {"dense_tps": d, "sparse_tps": s_, "ratios": ratios,
                                          "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
                                          "ratio_max": max(ratios)}
        for test, key in (("tg", "tg_tps"), ("pp", "pp_tps")):
            if (a.tg if test == "tg" else a.pp) <= 0:
                continue
            d = [r[key] for r in rows["dense"]]
            s = [r[key] for r in rows["sparse"]]
            ratios = [y / x for x, y in zip(d, s)]
            res[test] = {"dense_tps": d, "sparse_tps": s, "ratios": ratios, "ratio_median": statistics.median(ratios),
                         "ratio_min": min(ratios), "ratio_max": max(ratios)}
            if test == "tg":
                res[test]["sparse_roofline_fraction"] = [r.get("tg_roofline_fraction") for r in rows["sparse"]]
                res[test]["dense_roofline_fraction"] = [r.get("tg_roofline_fraction") for r in rows["dense"]]
        out["pairs"].append(res)
        print(json.dumps(res), file=sys.stderr)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

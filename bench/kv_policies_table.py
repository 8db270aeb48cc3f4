#!/usr/bin/env python3
"""Markdown tables from tessera_kv_policies_bench's JSON (files given as
arguments, merged, or stdin): perplexity per model, policy and budget;
decode tokens/s and KV bytes by position.

  bench/kv_policies_table.py run1.json [run2.json ...]
"""
import json
import sys


def load(args):
    if not args:
        j = json.load(sys.stdin)
        return j["tokens"], j["runs"]
    runs, tokens = [], None
    for f in args:
        with open(f) as fh:
            j = json.load(fh)
        tokens = j["tokens"]
        runs += j["runs"]
    return tokens, runs


def main():
    tokens, runs = load(sys.argv[1:])
    models = []
    for r in runs:
        if r["model"] not in models:
            models.append(r["model"])
    for m in models:
        rs = [r for r in runs if r["model"] == m]
        rs.sort(key=lambda r: (r["policy"] != "dense", r["budget"]))
        print(f"\n**{m.split('/')[-1]}** (context in the file: {rs[0]['n_ctx_train']}), {tokens} tokens, one stream\n")
        print("| policy | budget | recent | granularity | ppl | tokens/s | ppl by 1000 tokens (1st, 2nd, 5th, 10th, last) "
              "| KV bytes at the end |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rs:
            seg = r["segment_ppl"]
            pick = [seg[i] for i in (0, 1, 4, 9) if i < len(seg)] + ([seg[-1]] if seg else [])
            kvb = r["segment_kv_bytes"][-1] if r["segment_kv_bytes"] else 0
            budget = r["budget"] if r["policy"] != "dense" else "all"
            recent = r.get("recent") or ""
            print(f"| {r['policy']} | {budget} | {recent} | {r['granularity'] or 'block'} | {r['ppl']:.3f} | "
                  f"{r['tokens_per_s']:.0f} | " + ", ".join(f"{x:.2f}" for x in pick) + f" | {kvb / 1024:.0f} KiB |")


if __name__ == "__main__":
    main()

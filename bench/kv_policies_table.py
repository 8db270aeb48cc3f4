#!/usr/bin/env python3
"""Markdown tables from tessera_kv_policies_bench's JSON (stdin): perplexity
per model, policy and budget; decode tokens/s and KV bytes by position."""
import json
import sys

j = json.load(sys.stdin)
runs = j["runs"]
models = sorted({r["model"] for r in runs}, key=lambda m: [r["model"] for r in runs].index(m))
for m in models:
    rs = [r for r in runs if r["model"] == m]
    print(f"\n**{m.split('/')[-1]}** (trained on {rs[0]['n_ctx_train']} tokens), {j['tokens']} tokens, one stream\n")
    print("| policy | budget | granularity | ppl | tokens/s | ppl by 1000 tokens (first, 2nd, 5th, 10th, last) | KV bytes at the end |")
    print("|---|---|---|---|---|---|---|")
    for r in rs:
        seg = r["segment_ppl"]
        pick = [seg[i] for i in (0, 1, 4, 9) if i < len(seg)] + ([seg[-1]] if seg else [])
        kvb = r["segment_kv_bytes"][-1] if r["segment_kv_bytes"] else 0
        budget = r["budget"] if r["policy"] != "dense" else "all"
        print(f"| {r['policy']} | {budget} | {r['granularity'] or 'block'} | {r['ppl']:.3f} | {r['tokens_per_s']:.0f} | "
              + ", ".join(f"{x:.2f}" for x in pick) + f" | {kvb / 1024:.0f} KiB |")

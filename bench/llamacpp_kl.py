"""Perplexity ratio and KL divergence from two llama.cpp probability dumps
(bench/llamacpp_probs.mjs: f32 [rows, n_vocab], same tokens and chunks), as
tessera perplexity --kl reports them (src/eval/kl_divergence.h).

usage: /usr/bin/python3 bench/llamacpp_kl.py BASE.probs Q.probs TOKENS.txt CTX N_VOCAB
Prints one JSON object.
"""

import json
import sys

import numpy as np


def main():
    base_path, q_path, tok_path, ctx, V = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    tokens = np.array([int(t) for t in open(tok_path).read().strip().strip("[]").split(",")])
    pb = np.fromfile(base_path, "<f4").reshape(-1, V).astype(np.float64)
    pq = np.fromfile(q_path, "<f4").reshape(-1, V).astype(np.float64)
    n_chunks = len(tokens) // ctx
    nxt = np.concatenate([tokens[c * ctx + ctx // 2 + 1:(c + 1) * ctx] for c in range(n_chunks)])
    assert len(nxt) == len(pb) == len(pq), (len(nxt), len(pb), len(pq))
    # Renormalise (the dump is float32) and keep logs finite.
    pb /= pb.sum(axis=1, keepdims=True)
    pq /= pq.sum(axis=1, keepdims=True)
    lb, lq = np.log(np.maximum(pb, 1e-45)), np.log(np.maximum(pq, 1e-45))
    kld = (pb * (lb - lq)).sum(axis=1)
    rows = np.arange(len(nxt))
    nll_q, nll_b = -lq[rows, nxt], -lb[rows, nxt]
    rep = {
        "rows": int(len(nxt)),
        "ppl": float(np.exp(nll_q.mean())),
        "ppl_base": float(np.exp(nll_b.mean())),
        "ppl_ratio": float(np.exp(nll_q.mean() - nll_b.mean())),
        "kld_mean": float(kld.mean()),
        "kld_error": float(kld.std() / np.sqrt(len(kld) - 1)),
        "kld_99": float(np.percentile(kld, 99)),
        "same_top": float((pb.argmax(axis=1) == pq.argmax(axis=1)).mean()),
    }
    print(json.dumps(rep))


if __name__ == "__main__":
    main()

"""Independent numpy references for the quantization toolkit (src/quant/,
src/eval/kl_divergence.cc), run with /usr/bin/python3 by the C++ tests.

  quant_ref.py kl IN OUT     KL-divergence report of rows of base
                             log-probabilities against logits
  quant_ref.py gptq IN OUT   GPTQ of one matrix, written from the paper in
                             matrix form: every column's error is pushed onto
                             all later columns at once (no lazy batches), the
                             inverse Hessian from numpy.linalg.inv

Binary formats (little endian) are described at each function.
"""

import json
import sys

import numpy as np


def kl(inp, out):
    """IN: i64 n, i64 V; f32 base[n, V] (log-probabilities); f32 logits[n, V];
    i64 next[n]. OUT: JSON report."""
    raw = open(inp, "rb").read()
    n, V = np.frombuffer(raw, "<i8", 2)
    off = 16
    base = np.frombuffer(raw, "<f4", n * V, off).reshape(n, V).astype(np.float64)
    off += 4 * n * V
    logits = np.frombuffer(raw, "<f4", n * V, off).reshape(n, V).astype(np.float64)
    off += 4 * n * V
    nxt = np.frombuffer(raw, "<i8", n, off)
    m = logits.max(axis=1, keepdims=True)
    lq = logits - (m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True)))
    kld = (np.exp(base) * (base - lq)).sum(axis=1)
    rows = np.arange(n)
    lp, lpb = lq[rows, nxt], base[rows, nxt]
    d = lpb - lp
    same = (base.argmax(axis=1) == logits.argmax(axis=1)).astype(np.float64)
    pct = [99.9, 99, 95, 90, 50, 10, 5, 1, 0.1]
    rep = {
        "ppl": float(np.exp(-lp.mean())),
        "ppl_base": float(np.exp(-lpb.mean())),
        "mean_ln_ratio": float(d.mean()),
        "ln_ratio_error": float(d.std() / np.sqrt(n - 1)),
        "kld_mean": float(kld.mean()),
        "kld_error": float(kld.std() / np.sqrt(n - 1)),
        "kld_max": float(kld.max()),
        "kld_min": float(kld.min()),
        "kld_quantiles": [float(v) for v in np.percentile(kld, pct)],
        "same_top": float(same.mean()),
        "rms_dp": float(np.sqrt(np.mean((np.exp(lp) - np.exp(lpb)) ** 2))),
    }
    open(out, "w").write(json.dumps(rep))


def f16(x):
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def block_scales(w, qmin, qmax, signed_max):
    """w: [rows, block] -> fp16-rounded scales [rows] (as Q4_0 / Q8_0 choose them)."""
    w = w.astype(np.float32)
    idx = np.abs(w).argmax(axis=1)
    if signed_max:
        d = w[np.arange(w.shape[0]), idx] / np.float32(qmin)
    else:
        d = np.abs(w).max(axis=1) / np.float32(qmax)
    return f16(d)


def search_scales(w, Hb, qmin, qmax, signed_max, steps):
    """w: [rows, block]; Hb: [block, block]. Per row, the candidate scale
    (the block's own and, on signed grids, its mirror mapping the extreme to
    qmax, each times 1 - 0.05 k for k < steps) with the least rounding error
    d^T Hb d; the first of equal ones."""
    base = block_scales(w, qmin, qmax, signed_max)
    own = [base]
    if signed_max:
        own.append(f16(-base * np.float32(qmin) / np.float32(qmax)))
    cands = [f16(o * (np.float32(1) - np.float32(0.05) * np.float32(k))) for o in own for k in range(steps)]
    w64 = w.astype(np.float32).astype(np.float64)
    errs = []
    for sc in cands:
        q = levels_of(w, sc[:, None], qmin, qmax)
        d = w64 - sc[:, None].astype(np.float64) * q
        errs.append(np.einsum("ri,ij,rj->r", d, Hb, d))
    best = np.argmin(np.stack(errs), axis=0)
    out = np.stack(cands)[best, np.arange(w.shape[0])]
    return np.where(base == 0, base, out).astype(np.float32)


def levels_of(w, d, qmin, qmax):
    w = w.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d != 0, w / d, np.float32(0))
    return np.rint(np.clip(q, qmin, qmax)).astype(np.int64)


def gptq(inp, out):
    """IN: i64 rows, cols, block, qmin, qmax, signed_max, act_order, scale steps; f64 damp;
    f32 W[rows, cols]; f64 H[cols, cols]. OUT: i8 levels[rows, cols];
    f32 scales[rows, cols / block]."""
    raw = open(inp, "rb").read()
    rows, cols, B, qmin, qmax, signed_max, act_order, steps = (int(v) for v in np.frombuffer(raw, "<i8", 8))
    damp = float(np.frombuffer(raw, "<f8", 1, 64)[0])
    off = 72
    W = np.frombuffer(raw, "<f4", rows * cols, off).reshape(rows, cols).astype(np.float64)
    off += 4 * rows * cols
    H = np.frombuffer(raw, "<f8", cols * cols, off).reshape(cols, cols).copy()

    dead = np.diag(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    perm = np.argsort(-np.diag(H), kind="stable") if act_order else np.arange(cols)
    H0 = H.copy()  # the scale search weighs errors with H's blocks before dampening

    def scales_of(wb, c0):
        if steps == 0:
            return block_scales(wb, qmin, qmax, signed_max)
        return search_scales(wb, H0[c0:c0 + B, c0:c0 + B], qmin, qmax, signed_max, steps)

    H = H + damp * np.mean(np.diag(H)) * np.eye(cols)
    Hp = H[perm][:, perm]
    U = np.linalg.cholesky(np.linalg.inv(Hp)).T  # H^-1 = U^T U
    scales = np.zeros((rows, cols // B), np.float32)
    if act_order:
        for b in range(cols // B):
            scales[:, b] = scales_of(W[:, b * B:(b + 1) * B], b * B)
    levels = np.zeros((rows, cols), np.int64)
    Wp = W[:, perm].copy()
    for i in range(cols):
        col = perm[i]
        if not act_order and col % B == 0:
            scales[:, col // B] = scales_of(Wp[:, i:i + B], col)
        d = scales[:, col // B]
        q = levels_of(Wp[:, i], d, qmin, qmax)
        levels[:, col] = q
        err = (Wp[:, i] - d.astype(np.float64) * q) / U[i, i]
        Wp[:, i + 1:] -= np.outer(err, U[i, i + 1:])
    with open(out, "wb") as f:
        f.write(levels.astype(np.int8).tobytes())
        f.write(scales.astype("<f4").tobytes())


if __name__ == "__main__":
    {"kl": kl, "gptq": gptq}[sys.argv[1]](sys.argv[2], sys.argv[3])

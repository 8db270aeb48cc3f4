#!/usr/bin/python3
"""Train a small Mixtral-style mixture-of-experts model on TinyStories and
write it as a GGUF file that Tessera and llama.cpp load.

Why: the mixture-of-experts code paths (routing, expert matmuls, quantized
expert tensors) need a *trained* model to be measured meaningfully. With
random experts every expert is as good as any other, so perplexity differences
under quantization or routing changes mean nothing; a trained model whose
experts have specialised gives perplexities that react the way a real
Mixtral's would.

The model (GGUF architecture "llama" with expert tensors, i.e. Mixtral):
vocabulary of stories260K (512 tokens, copied), n_embd 128, 4 layers, 4 heads
of 32, 2 KV heads, RMSNorm eps 1e-5, RoPE on interleaved pairs (2i, 2i+1)
with base 10000 (exactly as llama.cpp rotates arch "llama", so Q and K are
written unpermuted), 8 SwiGLU experts of width 256 with top-2 routing
(softmax over 8, keep 2, renormalise), tied embeddings, context 256, no
biases. A Switch-Transformer load-balancing loss keeps all experts in use.

Data: ../shared/data/tinystories_val_prefix.txt, tokenized by Tessera's
own tokenizer (`tessera tokenize --bos`), split at a blank line near 90% of
the text: the first part trains, the last part validates. Validation
perplexity is computed as llama-perplexity (and `tessera perplexity`) does:
non-overlapping chunks of 256 tokens, the first replaced by BOS, the second
half of each chunk scored. The checkpoint with the best validation loss is
kept, written as F16 GGUF, read back, and checked with `tessera perplexity`.

Deterministic for a given --seed and --steps (--minutes picks the step count
from the measured speed, so it depends on the machine). --dim, --layers,
--heads, --kv-heads and --ff change the shape (models/stories-moe's wide
model: --dim 512 --layers 2 --heads 8 --kv-heads 2 --ff 1024, rows wide
enough for QMoE's per-row scales to cost little).

Run with Debian's python3 and python3-torch (apt-get install python3-torch
libopenblas0-openmp):
    /usr/bin/python3 scripts/train_moe.py --tessera build/tessera \
        --steps 1500 --out models/stories-moe/stories-moe-8x.gguf
Debian's torch calls the system libblas.so.3, which by default is the
reference BLAS: about 20x slower here than OpenBLAS. When OpenBLAS is
installed the script runs itself again with it first on LD_LIBRARY_PATH (the
system's BLAS choice is left alone).
"""

import argparse
import copy
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

OPENBLAS_DIR = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


def use_openblas():
    """Re-run this script with OpenBLAS ahead of the reference libblas.so.3."""
    if Path(OPENBLAS_DIR, "libblas.so.3").exists() and os.environ.get("TRAIN_MOE_BLAS") != OPENBLAS_DIR:
        env = dict(os.environ, TRAIN_MOE_BLAS=OPENBLAS_DIR,
                   LD_LIBRARY_PATH=":".join(filter(None, [OPENBLAS_DIR, os.environ.get("LD_LIBRARY_PATH")])))
        os.execve(sys.executable, [sys.executable] + sys.argv, env)


def blas_library():
    """The libblas this process loaded (torch links libblas.so.3)."""
    maps = Path("/proc/self/maps").read_text()
    libs = {line.split()[-1] for line in maps.splitlines() if "libblas" in line or "libopenblas" in line}
    return sorted(libs)


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "reference"))
import gguf_ref  # noqa: E402  (the project's independent GGUF reader)

SHARED = REPO.parent / "shared"
VOCAB_GGUF = SHARED / "models" / "stories260K" / "stories260K.gguf"
DATA = SHARED / "data" / "tinystories_val_prefix.txt"
BOS = 1

CFG = dict(n_vocab=512, n_embd=128, n_layer=4, n_head=4, n_head_kv=2, n_ff=256,
           n_expert=8, n_expert_used=2, n_ctx=256, rope_base=10000.0, rms_eps=1e-5)


# ----------------------------------------------------------------------------
# Data


def split_text(text, frac):
    """Split at the blank line nearest to `frac` of the text."""
    target = int(len(text) * frac)
    before = text.rfind("\n\n", 0, target)
    after = text.find("\n\n", target)
    cut = before if after < 0 or (before >= 0 and target - before <= after - target) else after
    return text[:cut + 2], text[cut + 2:]


def tessera_tokenize(tessera, path):
    """Token ids of a text file as Tessera computes them, with BOS."""
    out = subprocess.run([tessera, "tokenize", "-m", str(VOCAB_GGUF), "-f", str(path), "--bos"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def load_data(tessera, val_text_path, frac=0.9):
    text = DATA.read_text(encoding="utf-8")
    train_text, val_text = split_text(text, frac)
    Path(val_text_path).write_text(val_text, encoding="utf-8")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8", delete=False) as f:
        f.write(train_text)
    try:
        train = tessera_tokenize(tessera, f.name)
    finally:
        os.unlink(f.name)
    val = tessera_tokenize(tessera, val_text_path)
    return torch.tensor(train, dtype=torch.long), torch.tensor(val, dtype=torch.long)


def get_batch(data, batch, n_ctx, gen):
    """Random windows; position 0 becomes BOS, as in the perplexity chunks."""
    starts = torch.randint(0, len(data) - n_ctx - 1, (batch,), generator=gen)
    x = torch.stack([data[s:s + n_ctx] for s in starts.tolist()])
    y = torch.stack([data[s + 1:s + n_ctx + 1] for s in starts.tolist()])
    x[:, 0] = BOS
    return x, y


# ----------------------------------------------------------------------------
# Model


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(n_ctx, head_dim, base):
    """cos/sin [n_ctx, head_dim/2]: pair i turns by pos * base^(-2i/head_dim)."""
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.arange(n_ctx, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):
    """llama.cpp's normal (non-NeoX) RoPE: rotate pairs (2i, 2i+1). x [B,H,T,D]."""
    T = x.shape[2]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[:T], sin[:T]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, self.h, self.hkv = c["n_embd"], c["n_head"], c["n_head_kv"]
        self.hd = d // self.h
        self.wq = nn.Linear(d, self.h * self.hd, bias=False)
        self.wk = nn.Linear(d, self.hkv * self.hd, bias=False)
        self.wv = nn.Linear(d, self.hkv * self.hd, bias=False)
        self.wo = nn.Linear(self.h * self.hd, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.wk(x).view(B, T, self.hkv, self.hd).transpose(1, 2)
        v = self.wv(x).view(B, T, self.hkv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.h // self.hkv  # query head j reads KV head j // rep (as ggml broadcasts)
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        return self.wo((att @ v).transpose(1, 2).reshape(B, T, -1))


class MoE(nn.Module):
    """Mixtral's sparse FFN: top-k of softmax(router), weights renormalised."""

    def __init__(self, c):
        super().__init__()
        d, f, self.E, self.k = c["n_embd"], c["n_ff"], c["n_expert"], c["n_expert_used"]
        self.router = nn.Linear(d, self.E, bias=False)
        self.w_gate = nn.Parameter(torch.randn(self.E, f, d) * 0.02)  # [E, out, in]
        self.w_up = nn.Parameter(torch.randn(self.E, f, d) * 0.02)
        self.w_down = nn.Parameter(torch.randn(self.E, d, f) * 0.02)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = self.router(x).softmax(-1)
        top_w, top_i = probs.topk(self.k, dim=-1)
        top_w = top_w / top_w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(self.E):
            tok, slot = (top_i == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            xe = x[tok]
            h = F.silu(xe @ self.w_gate[e].t()) * (xe @ self.w_up[e].t())
            out.index_add_(0, tok, (h @ self.w_down[e].t()) * top_w[tok, slot, None])
        # Switch-Transformer balance loss: E * sum_e (share of assignments) * (mean prob).
        share = torch.bincount(top_i.flatten(), minlength=self.E).float() / top_i.numel()
        aux = self.E * (share * probs.mean(0)).sum()
        return out.view(shape), aux, share.detach()


class Block(nn.Module):
    def __init__(self, c, dropout):
        super().__init__()
        self.attn_norm = RMSNorm(c["n_embd"], c["rms_eps"])
        self.attn = Attention(c)
        self.ffn_norm = RMSNorm(c["n_embd"], c["rms_eps"])
        self.moe = MoE(c)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, cos, sin):
        x = x + self.drop(self.attn(self.attn_norm(x), cos, sin))
        y, aux, share = self.moe(self.ffn_norm(x))
        return x + self.drop(y), aux, share


class MoEModel(nn.Module):
    def __init__(self, c, dropout=0.0):
        super().__init__()
        self.c = c
        self.tok_emb = nn.Embedding(c["n_vocab"], c["n_embd"])
        self.blocks = nn.ModuleList(Block(c, dropout) for _ in range(c["n_layer"]))
        self.norm = RMSNorm(c["n_embd"], c["rms_eps"])
        cos, sin = rope_tables(c["n_ctx"], c["n_embd"] // c["n_head"], c["rope_base"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self._init_weights()

    def _init_weights(self):
        out_std = 0.02 / math.sqrt(2 * self.c["n_layer"])  # residual outputs, as GPT-2
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                continue
            std = out_std if ("wo." in name or "w_down" in name) else 0.02
            nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx):
        x = self.tok_emb(idx)
        aux, shares = 0.0, []
        for blk in self.blocks:
            x, a, s = blk(x, self.cos, self.sin)
            aux, shares = aux + a, shares + [s]
        logits = self.norm(x) @ self.tok_emb.weight.t()  # tied output
        return logits, aux / len(self.blocks), torch.stack(shares)


# ----------------------------------------------------------------------------
# Evaluation


@torch.no_grad()
def chunk_nll(model, tokens, n_ctx, max_chunks=None, batch=16):
    """llama-perplexity's method: chunks of n_ctx with BOS first, scoring the
    predictions at positions n_ctx/2 .. n_ctx-2. Returns (mean nll, count,
    [layer, expert] share of the routing assignments over all positions)."""
    model.eval()
    n_chunks = len(tokens) // n_ctx
    if max_chunks:
        n_chunks = min(n_chunks, max_chunks)
    chunks = tokens[:n_chunks * n_ctx].view(n_chunks, n_ctx).clone()
    targets = chunks[:, n_ctx // 2 + 1:]
    chunks[:, 0] = BOS
    total, count, share = 0.0, 0, 0.0
    for i in range(0, n_chunks, batch):
        logits, _, s = model(chunks[i:i + batch])
        share = share + s * len(chunks[i:i + batch])
        lp = logits[:, n_ctx // 2:n_ctx - 1].double().log_softmax(-1)
        total -= lp.gather(-1, targets[i:i + batch, :, None]).sum().item()
        count += targets[i:i + batch].numel()
    model.train()
    return total / count, count, share / n_chunks


# ----------------------------------------------------------------------------
# Training


def lr_at(step, total, peak, warmup, floor=0.1):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))


def make_optimizer(model, lr, wd):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


def train_step(model, opt, x, y, aux_coef):
    logits, aux, _ = model(x)
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
    opt.zero_grad(set_to_none=True)
    (loss + aux_coef * aux).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item(), aux.item()


def planned_steps(args, step, elapsed, eval_secs):
    """--minutes: the step count that fits the budget, measured at `step`."""
    per_step = elapsed / step
    per_eval = eval_secs / args.eval_every
    left = args.minutes * 60 - elapsed - 30  # the final evaluation and export
    return step + max(0, int(left / (per_step + per_eval)))


def train(model, train_ids, val_ids, args):
    c = model.c
    gen = torch.Generator().manual_seed(args.seed)
    opt = make_optimizer(model, args.lr, args.weight_decay)
    total = args.steps or 10**9
    best = (float("inf"), -1, None)
    t0, eval_secs, smooth, history = time.time(), 0.0, None, []
    step = 0
    while step < total:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, args.lr, args.warmup)
        x, y = get_batch(train_ids, args.batch, c["n_ctx"], gen)
        loss, aux = train_step(model, opt, x, y, args.aux_coef)
        smooth = loss if smooth is None else 0.95 * smooth + 0.05 * loss
        step += 1
        if not args.steps and step == args.calibrate:
            total = planned_steps(args, step, time.time() - t0, eval_secs + 2.0)
            print(f"[calibrate] {(time.time() - t0) / step:.3f} s/step -> {total} steps", flush=True)
        if step % args.eval_every == 0 or step == total:
            te = time.time()
            val, _, val_share = chunk_nll(model, val_ids, c["n_ctx"])
            eval_secs += time.time() - te
            if val < best[0]:
                best = (val, step, copy.deepcopy(model.state_dict()))
            use = f"{val_share.min().item():.3f}..{val_share.max().item():.3f}"
            print(f"step {step:5d}/{total}  loss {smooth:.4f}  aux {aux:.3f}  val {val:.4f} "
                  f"(ppl {math.exp(val):.3f})  lr {opt.param_groups[0]['lr']:.2e}  "
                  f"{time.time() - t0:6.0f}s  expert shares {use}", flush=True)
            history.append(dict(step=step, train_loss=smooth, val_loss=val))
    model.load_state_dict(best[2])
    return dict(steps=step, best_step=best[1], seconds=time.time() - t0, history=history)


# ----------------------------------------------------------------------------
# GGUF


def source_kvs(path):
    """(key, type, raw value bytes) of every metadata entry, copied verbatim."""
    buf = Path(path).read_bytes()
    r = gguf_ref._Reader(memoryview(buf), str(path))
    assert bytes(r.take(4, "magic")) == b"GGUF"
    r.scalar("<I", "version"), r.scalar("<Q", "tensors")
    out = []
    for _ in range(r.scalar("<Q", "kvs")):
        key = r.string("key")
        vtype = r.scalar("<I", key)
        start = r.pos
        r.value(vtype, key)
        out.append((key, vtype, bytes(buf[start:r.pos])))
    return out


def gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def model_kvs(c, name):
    u32 = lambda v: (gguf_ref.T_U32, struct.pack("<I", v))  # noqa: E731
    f32 = lambda v: (gguf_ref.T_F32, struct.pack("<f", v))  # noqa: E731
    return [
        ("general.architecture", gguf_ref.T_STRING, gguf_str("llama")),
        ("general.name", gguf_ref.T_STRING, gguf_str(name)),
        ("general.file_type", *u32(1)),  # mostly F16
        ("llama.vocab_size", *u32(c["n_vocab"])),
        ("llama.context_length", *u32(c["n_ctx"])),
        ("llama.embedding_length", *u32(c["n_embd"])),
        ("llama.block_count", *u32(c["n_layer"])),
        ("llama.feed_forward_length", *u32(c["n_ff"])),
        ("llama.attention.head_count", *u32(c["n_head"])),
        ("llama.attention.head_count_kv", *u32(c["n_head_kv"])),
        ("llama.rope.freq_base", *f32(c["rope_base"])),
        ("llama.attention.layer_norm_rms_epsilon", *f32(c["rms_eps"])),
        ("llama.rope.dimension_count", *u32(c["n_embd"] // c["n_head"])),
        ("llama.expert_count", *u32(c["n_expert"])),
        ("llama.expert_used_count", *u32(c["n_expert_used"])),
        # llama.cpp's Mixtral files omit this (experts are feed_forward_length
        # wide); Tessera reads it, and it says the same thing.
        ("llama.expert_feed_forward_length", *u32(c["n_ff"])),
    ]


def gguf_tensors(model):
    """(name, numpy array in GGUF order) — numpy shape is the reverse of ne."""
    f16 = lambda t: t.detach().float().numpy().astype(np.float16)  # noqa: E731
    f32 = lambda t: t.detach().float().numpy().astype(np.float32)  # noqa: E731
    out = [("token_embd.weight", f16(model.tok_emb.weight)),
           ("output_norm.weight", f32(model.norm.weight))]
    for i, b in enumerate(model.blocks):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", f32(b.attn_norm.weight)),
                (p + "attn_q.weight", f16(b.attn.wq.weight)),
                (p + "attn_k.weight", f16(b.attn.wk.weight)),
                (p + "attn_v.weight", f16(b.attn.wv.weight)),
                (p + "attn_output.weight", f16(b.attn.wo.weight)),
                (p + "ffn_norm.weight", f32(b.ffn_norm.weight)),
                (p + "ffn_gate_inp.weight", f32(b.moe.router.weight)),
                (p + "ffn_gate_exps.weight", f16(b.moe.w_gate)),
                (p + "ffn_up_exps.weight", f16(b.moe.w_up)),
                (p + "ffn_down_exps.weight", f16(b.moe.w_down))]
    return out


def write_gguf(path, kvs, tensors, align=32):
    pad = lambda n: (-n) % align  # noqa: E731
    infos, blobs, offset = b"", [], 0
    for name, arr in tensors:
        ggml_type = gguf_ref.GGML_F16 if arr.dtype == np.float16 else gguf_ref.GGML_F32
        ne = list(reversed(arr.shape))
        infos += gguf_str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        infos += struct.pack("<IQ", ggml_type, offset)
        data = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        blobs.append(data + b"\0" * pad(len(data)))
        offset += len(blobs[-1])
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, vtype, raw in kvs:
        head += gguf_str(key) + struct.pack("<I", vtype) + raw
    head += infos
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(head + b"\0" * pad(len(head)))
        for blob in blobs:
            f.write(blob)


def export(model, path, name):
    kvs = model_kvs(model.c, name)
    kvs += [kv for kv in source_kvs(VOCAB_GGUF) if kv[0].startswith("tokenizer.")]
    tensors = gguf_tensors(model)
    write_gguf(path, kvs, tensors)
    back = gguf_ref.GGUFFile(str(path))  # read back with the independent reader
    for name, arr in tensors:
        got = back.tensor(name)
        assert got.shape == arr.shape and np.array_equal(got, arr.astype(np.float64)), name
    return tensors


def load_exported(model, tensors):
    """A copy of the model holding exactly the weights written (f16-rounded)."""
    m = copy.deepcopy(model)
    t = {n: torch.from_numpy(a.astype(np.float32)) for n, a in tensors}
    with torch.no_grad():
        m.tok_emb.weight.copy_(t["token_embd.weight"])
        m.norm.weight.copy_(t["output_norm.weight"])
        for i, b in enumerate(m.blocks):
            p = f"blk.{i}."
            for mod, key in [(b.attn_norm, "attn_norm"), (b.attn.wq, "attn_q"), (b.attn.wk, "attn_k"),
                             (b.attn.wv, "attn_v"), (b.attn.wo, "attn_output"), (b.ffn_norm, "ffn_norm"),
                             (b.moe.router, "ffn_gate_inp")]:
                mod.weight.copy_(t[p + key + ".weight"])
            b.moe.w_gate.copy_(t[p + "ffn_gate_exps.weight"])
            b.moe.w_up.copy_(t[p + "ffn_up_exps.weight"])
            b.moe.w_down.copy_(t[p + "ffn_down_exps.weight"])
    return m


def tessera_ppl(tessera, gguf, text_path, n_ctx):
    out = subprocess.run([tessera, "perplexity", "-m", str(gguf), "-f", str(text_path), "-c", str(n_ctx),
                          "-t", "2", "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])["ppl"]


# ----------------------------------------------------------------------------


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(REPO / "models" / "stories-moe" / "stories-moe-8x.gguf"))
    p.add_argument("--name", default="stories-moe-8x", help="general.name")
    p.add_argument("--tessera", default=str(REPO / "build" / "tessera"), help="Tessera CLI binary")
    p.add_argument("--val-text", default="/tmp/stories-moe-val.txt", help="where to write the validation text")
    p.add_argument("--steps", type=int, default=0, help="training steps (deterministic)")
    p.add_argument("--minutes", type=float, default=13.0, help="without --steps: the training budget")
    p.add_argument("--calibrate", type=int, default=30, help="--minutes: steps timed before planning")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--aux-coef", type=float, default=0.01)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    # The shape (defaults: CFG above, the 8x model of models/stories-moe).
    p.add_argument("--dim", type=int, help="n_embd")
    p.add_argument("--layers", type=int, help="n_layer")
    p.add_argument("--heads", type=int, help="n_head")
    p.add_argument("--kv-heads", type=int, help="n_head_kv")
    p.add_argument("--ff", type=int, help="an expert's FFN width")
    args = p.parse_args()
    for key, value in (("n_embd", args.dim), ("n_layer", args.layers), ("n_head", args.heads),
                       ("n_head_kv", args.kv_heads), ("n_ff", args.ff)):
        if value is not None:
            CFG[key] = value
    return args


def main():
    args = parse_args()
    blas = blas_library()
    print(f"torch {torch.__version__}, BLAS {blas}", flush=True)
    if not any("openblas" in lib for lib in blas):
        print("warning: reference BLAS; training is ~20x slower (apt-get install libopenblas0-openmp)")
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    t_start = time.time()
    train_ids, val_ids = load_data(args.tessera, args.val_text)
    n_train, n_val = len(train_ids), len(val_ids)
    print(f"tokens: train {n_train}, val {n_val} ({100 * n_val / (n_train + n_val):.1f}%)", flush=True)
    model = MoEModel(CFG, args.dropout)
    print(f"parameters: {sum(p.numel() for p in model.parameters())}", flush=True)
    stats = train(model, train_ids, val_ids, args)
    result = finish(model, train_ids, val_ids, stats, args)
    result.update(wall_seconds=round(time.time() - t_start, 1), torch=torch.__version__,
                  threads=args.threads, blas=blas)
    text = json.dumps(result, indent=2)
    print(re.sub(r"\[\s+([-0-9.,\s]+?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text))


def finish(model, train_ids, val_ids, stats, args):
    """Evaluate the best checkpoint, write the GGUF, check it with Tessera.
    train_loss is measured like val_loss (perplexity chunks, no dropout) on
    as many training chunks as there are validation chunks."""
    n_ctx = CFG["n_ctx"]
    train_nll, _, _ = chunk_nll(model, train_ids, n_ctx, max_chunks=len(val_ids) // n_ctx)
    val_nll, n_scored, share = chunk_nll(model, val_ids, n_ctx)
    tensors = export(model, args.out, args.name)
    val_nll16, _, _ = chunk_nll(load_exported(model, tensors), val_ids, n_ctx)
    t_ppl = tessera_ppl(args.tessera, args.out, args.val_text, n_ctx)
    return dict(
        out=str(args.out), seed=args.seed, steps=stats["steps"], best_step=stats["best_step"],
        batch=args.batch, n_ctx=n_ctx, tokens_seen=stats["steps"] * args.batch * n_ctx,
        train_tokens=len(train_ids), val_tokens=len(val_ids), val_scored=n_scored,
        train_loss=round(train_nll, 5), train_loss_running=round(stats["history"][-1]["train_loss"], 5),
        val_loss=round(val_nll, 5), val_ppl=round(math.exp(val_nll), 4),
        val_ppl_f16_torch=round(math.exp(val_nll16), 4), val_ppl_tessera=round(t_ppl, 4),
        tessera_vs_torch_f16=round(t_ppl / math.exp(val_nll16) - 1, 6),
        val_expert_share=[[round(v, 4) for v in layer] for layer in share.tolist()],
        train_seconds=round(stats["seconds"], 1),
    )


if __name__ == "__main__":
    use_openblas()
    main()

#!/usr/bin/python3
"""One LoRA training step of a Llama GGUF in PyTorch (float64, autograd):
the independent reference for Tessera's backward passes (src/train/,
tests/train_lora_step_test.cc). Written from the model's definition (RMSNorm,
RoPE on the first n_rot dims, grouped-query causal attention, SwiGLU, tied or
untied output), reading the base model with gguf_ref.py and the adapter from
llama.cpp's adapter GGUF (delta = alpha / rank * B A x).

    torch_lora_step.py MODEL.gguf ADAPTER.gguf TOKENS OUT

TOKENS: comma-separated ids. OUT gets float64 little-endian: the loss (mean
cross-entropy of tokens[1:]), then for every layer and every target in
Tessera's order (attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up,
ffn_down) that the adapter has: dL/dA [rank][in], then dL/dB transposed
[rank][out] (Tessera keeps B as [rank][out]).
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_ref  # noqa: E402

TARGETS = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


def main():
    model_path, adapter_path, tokens_arg, out_path = sys.argv[1:5]
    g = gguf_ref.GGUFFile(model_path)
    arch = g.get("general.architecture")
    if arch != "llama":
        sys.exit(f"torch_lora_step: architecture {arch} is not written here")
    key = lambda k: g.get(f"{arch}.{k}")  # noqa: E731
    n_embd, n_layer, n_head = int(key("embedding_length")), int(key("block_count")), int(key("attention.head_count"))
    n_head_kv = int(key("attention.head_count_kv") or n_head)
    head_dim = n_embd // n_head
    n_rot = int(key("rope.dimension_count") or head_dim)
    base = float(key("rope.freq_base") or 10000.0)
    eps = float(key("attention.layer_norm_rms_epsilon"))
    T = lambda name: torch.tensor(g.tensor(name), dtype=torch.float64)  # noqa: E731

    a = gguf_ref.GGUFFile(adapter_path)
    alpha = float(a.get("adapter.lora.alpha", 0.0))
    lora = {}
    for il in range(n_layer):
        for t in TARGETS:
            stem = f"blk.{il}.{t}.weight"
            if stem + ".lora_a" in a.tensors:
                A = torch.tensor(a.tensor(stem + ".lora_a"), dtype=torch.float64, requires_grad=True)  # [rank][in]
                B = torch.tensor(a.tensor(stem + ".lora_b"), dtype=torch.float64, requires_grad=True)  # [out][rank]
                lora[(il, t)] = (A, B, alpha / A.shape[0] if alpha else 1.0)

    tokens = [int(x) for x in tokens_arg.split(",")]
    n = len(tokens)
    embd = T("token_embd.weight")
    out_w = T("output.weight") if "output.weight" in g.tensors else embd

    def rmsnorm(x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w

    def linear(x, il, t):
        y = x @ T(f"blk.{il}.{t}.weight").T
        if (il, t) in lora:
            A, B, s = lora[(il, t)]
            y = y + s * ((x @ A.T) @ B.T)
        return y

    half = n_rot // 2
    inv_freq = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / n_rot)
    ang = torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)  # [n, half]
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    neox = False  # llama: pairs (2i, 2i + 1)

    def rope(x):  # [n, heads, head_dim]
        re_idx = torch.arange(half) if neox else torch.arange(0, n_rot, 2)
        im_idx = torch.arange(half) + half if neox else torch.arange(1, n_rot, 2)
        re, im = x[..., re_idx], x[..., im_idx]
        y = x.clone()
        y[..., re_idx] = re * cos - im * sin
        y[..., im_idx] = re * sin + im * cos
        return y

    x = embd[tokens]
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    for il in range(n_layer):
        h = rmsnorm(x, T(f"blk.{il}.attn_norm.weight"))
        q = rope(linear(h, il, "attn_q").view(n, n_head, head_dim))
        k = rope(linear(h, il, "attn_k").view(n, n_head_kv, head_dim))
        v = linear(h, il, "attn_v").view(n, n_head_kv, head_dim)
        k = k.repeat_interleave(n_head // n_head_kv, dim=1)
        v = v.repeat_interleave(n_head // n_head_kv, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) / np.sqrt(head_dim)
        p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        att = torch.einsum("hts,shd->thd", p, v).reshape(n, n_head * head_dim)
        x = x + linear(att, il, "attn_output")
        h = rmsnorm(x, T(f"blk.{il}.ffn_norm.weight"))
        m = torch.nn.functional.silu(linear(h, il, "ffn_gate")) * linear(h, il, "ffn_up")
        x = x + linear(m, il, "ffn_down")
    logits = rmsnorm(x, T("output_norm.weight")) @ out_w.T
    loss = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(tokens[1:]))
    loss.backward()

    out = [np.array([loss.item()])]
    for il in range(n_layer):
        for t in TARGETS:
            if (il, t) in lora:
                A, B, _ = lora[(il, t)]
                out.append(A.grad.numpy().ravel())
                out.append(B.grad.numpy().T.ravel())
    np.concatenate(out).astype("<f8").tofile(out_path)


if __name__ == "__main__":
    main()

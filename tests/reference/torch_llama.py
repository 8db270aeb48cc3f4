"""A Llama GGUF as a PyTorch module written from the model's definition
(RMSNorm, RoPE on the first n_rot dims in llama's (2i, 2i + 1) pairs,
grouped-query causal attention, SwiGLU, tied or untied output), its base
weights frozen, with LoRA pairs on any linear: the reference of Tessera's
training (tests/reference/torch_lora_step.py) and the PyTorch side of
bench/finetune_torch.py. Reads GGUF with gguf_ref.py (exact dequantization).
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_ref  # noqa: E402

TARGETS = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


class TorchLlama:
    def __init__(self, path, dtype=torch.float64):
        g = gguf_ref.GGUFFile(path)
        arch = g.get("general.architecture")
        if arch != "llama":
            sys.exit(f"torch_llama: architecture {arch} is not written here")
        key = lambda k: g.get(f"{arch}.{k}")  # noqa: E731
        self.n_embd, self.n_layer = int(key("embedding_length")), int(key("block_count"))
        self.n_head = int(key("attention.head_count"))
        self.n_head_kv = int(key("attention.head_count_kv") or self.n_head)
        self.head_dim = self.n_embd // self.n_head
        self.n_rot = int(key("rope.dimension_count") or self.head_dim)
        self.base = float(key("rope.freq_base") or 10000.0)
        self.eps = float(key("attention.layer_norm_rms_epsilon"))
        self.dtype = dtype
        self.w = {name: torch.tensor(g.tensor(name), dtype=dtype) for name in g.tensors}
        self.out_w = self.w.get("output.weight", self.w["token_embd.weight"])
        self.lora = {}  # (layer, target) -> (A [rank][in], B [out][rank], scale)

    def add_lora(self, il, target, a, b, scale):
        self.lora[(il, target)] = (a, b, scale)

    def init_lora(self, rank, alpha, seed=1):
        """Fresh pairs on every linear (PEFT's init: A uniform in ±1/sqrt(in), B zero)."""
        gen = torch.Generator().manual_seed(seed)
        params = []
        for il in range(self.n_layer):
            for t in TARGETS:
                out, inn = self.w[f"blk.{il}.{t}.weight"].shape
                bound = 1.0 / np.sqrt(inn)
                a = ((torch.rand(rank, inn, generator=gen, dtype=self.dtype) * 2 - 1) * bound).requires_grad_()
                b = torch.zeros(out, rank, dtype=self.dtype, requires_grad=True)
                self.add_lora(il, t, a, b, alpha / rank)
                params += [a, b]
        return params

    def _rmsnorm(self, x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * w

    def _linear(self, x, il, t):
        y = x @ self.w[f"blk.{il}.{t}.weight"].T
        if (il, t) in self.lora:
            a, b, s = self.lora[(il, t)]
            y = y + s * ((x @ a.T) @ b.T)
        return y

    def logits(self, tokens):
        """tokens: LongTensor [batch][n] -> logits [batch][n][vocab]."""
        return self.logits_from(self.w["token_embd.weight"][tokens])

    def logits_from(self, x):
        """Input rows x [batch][n][n_embd] (token embeddings, or a soft prompt's rows first) -> logits."""
        bsz, n = x.shape[0], x.shape[1]
        H, KH, hd, half = self.n_head, self.n_head_kv, self.head_dim, self.n_rot // 2
        inv_freq = self.base ** (-2.0 * torch.arange(half, dtype=torch.float64) / self.n_rot)
        ang = torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)
        cos = torch.cos(ang).to(self.dtype)[:, None, :]
        sin = torch.sin(ang).to(self.dtype)[:, None, :]
        re_idx, im_idx = torch.arange(0, self.n_rot, 2), torch.arange(1, self.n_rot, 2)

        def rope(x):  # [batch, n, heads, hd]
            re, im = x[..., re_idx], x[..., im_idx]
            y = x.clone()
            y[..., re_idx] = re * cos - im * sin
            y[..., im_idx] = re * sin + im * cos
            return y

        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
        for il in range(self.n_layer):
            h = self._rmsnorm(x, self.w[f"blk.{il}.attn_norm.weight"])
            q = rope(self._linear(h, il, "attn_q").view(bsz, n, H, hd))
            k = rope(self._linear(h, il, "attn_k").view(bsz, n, KH, hd)).repeat_interleave(H // KH, dim=2)
            v = self._linear(h, il, "attn_v").view(bsz, n, KH, hd).repeat_interleave(H // KH, dim=2)
            s = torch.einsum("bthd,bshd->bhts", q, k) / np.sqrt(hd)
            p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
            att = torch.einsum("bhts,bshd->bthd", p, v).reshape(bsz, n, H * hd)
            x = x + self._linear(att, il, "attn_output")
            h = self._rmsnorm(x, self.w[f"blk.{il}.ffn_norm.weight"])
            m = torch.nn.functional.silu(self._linear(h, il, "ffn_gate")) * self._linear(h, il, "ffn_up")
            x = x + self._linear(m, il, "ffn_down")
        return self._rmsnorm(x, self.w["output_norm.weight"]) @ self.out_w.T

#!/usr/bin/python3
"""One LoRA training step of a Llama GGUF in PyTorch (float64, autograd):
the independent reference for Tessera's backward passes (src/train/,
tests/train_lora_step_test.cc); the model is torch_llama.py, the adapter
llama.cpp's adapter GGUF (delta = alpha / rank * B A x).

    torch_lora_step.py MODEL.gguf ADAPTER.gguf|- TOKENS OUT [PROMPT.npy]

TOKENS: comma-separated ids. OUT gets float64 little-endian: the loss (mean
cross-entropy of tokens[1:]), then for every layer and every target in
Tessera's order (attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up,
ffn_down) that the adapter has: dL/dA [rank][in], then dL/dB transposed
[rank][out] (Tessera keeps B as [rank][out]). With PROMPT.npy (a soft
prompt, [n_virtual][n_embd], its rows ahead of the tokens' embeddings),
then dL/dPROMPT.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_ref  # noqa: E402
from torch_llama import TARGETS, TorchLlama  # noqa: E402


def main():
    model_path, adapter_path, tokens_arg, out_path = sys.argv[1:5]
    m = TorchLlama(model_path)
    pairs = []
    a = gguf_ref.GGUFFile(adapter_path) if adapter_path != "-" else None
    alpha = float(a.get("adapter.lora.alpha", 0.0)) if a else 0.0
    for il in range(m.n_layer if a else 0):
        for t in TARGETS:
            stem = f"blk.{il}.{t}.weight"
            if stem + ".lora_a" in a.tensors:
                A = torch.tensor(a.tensor(stem + ".lora_a"), dtype=torch.float64, requires_grad=True)  # [rank][in]
                B = torch.tensor(a.tensor(stem + ".lora_b"), dtype=torch.float64, requires_grad=True)  # [out][rank]
                m.add_lora(il, t, A, B, alpha / A.shape[0] if alpha else 1.0)
                pairs.append((A, B))
    tokens = torch.tensor([[int(x) for x in tokens_arg.split(",")]])
    x = m.w["token_embd.weight"][tokens]
    prompt = None
    if len(sys.argv) > 5:
        prompt = torch.tensor(np.load(sys.argv[5]), dtype=torch.float64, requires_grad=True)
        x = torch.cat([prompt[None], x], dim=1)
    nv = prompt.shape[0] if prompt is not None else 0
    logits = m.logits_from(x)[0, nv:]
    loss = torch.nn.functional.cross_entropy(logits[:-1], tokens[0, 1:])
    loss.backward()
    out = [np.array([loss.item()])]
    for A, B in pairs:
        out.append(A.grad.numpy().ravel())
        out.append(B.grad.numpy().T.ravel())
    if prompt is not None:
        out.append(prompt.grad.numpy().ravel())
    np.concatenate(out).astype("<f8").tofile(out_path)


if __name__ == "__main__":
    main()

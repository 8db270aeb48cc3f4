#!/usr/bin/python3
"""PyTorch's LoRA training speed on the same model and recipe as `tessera
finetune` (fp32, rank 8 on all seven linears, AdamW, batches of windows of
ctx + 1 tokens from the tokens Tessera gives the text), for
bench/finetune_compare. Prints JSON: tokens/s over the timed steps (the
first is warm-up), the loss path, peak RSS.

    finetune_torch.py MODEL.gguf TOKENS (tessera tokenize's JSON array, or comma-separated ids) --steps N --batch B --ctx C --threads T [--lr LR]
"""
import argparse
import json
import os
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from torch_llama import TorchLlama  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("tokens")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=2e-3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    m = TorchLlama(args.model, dtype=torch.float32)
    params = m.init_lora(8, 16.0)
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    text = open(args.tokens).read().strip()
    ids = json.loads(text) if text.startswith("[") else [int(x) for x in text.split(",")]
    w = args.ctx + 1
    windows = torch.tensor([ids[i:i + w] for i in range(0, len(ids) - w + 1, w)])
    gen = torch.Generator().manual_seed(1)
    losses, start = [], None
    for step in range(args.steps + 1):
        if step == 1:
            start = time.perf_counter()
        batch = windows[torch.randint(len(windows), (args.batch,), generator=gen)]
        logits = m.logits(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    secs = time.perf_counter() - start
    print(json.dumps({"engine": f"pytorch {torch.__version__}", "threads": args.threads, "steps": args.steps,
                      "batch": args.batch, "ctx": args.ctx,
                      "tokens_per_s": args.steps * args.batch * args.ctx / secs, "seconds": secs,
                      "first_loss": losses[0], "last_loss": losses[-1],
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()

"""A small GPT-style model trained on CPU: the workload of benchmarks/overhead.py.

Many small modules (embedding, pre-norm attention blocks, MLPs, AdamW) make each step a long
chain of short PyTorch calls, so Python-level interference from a profiler (GIL hand-offs,
a woken thread, a busy second core) shows up here before it would in a few large matmuls.

The training loop alone is timed with time.perf_counter; interpreter start, `import torch`
and model construction are left out, so the number compares plain and profiled runs fairly.
The last stdout line is a JSON object:

    {"loop_s": ..., "steps": ..., "step_ms": ..., "loss": ..., "threads": ...}

`loss` is bit-for-bit reproducible for the same arguments and thread count, which lets the
caller check that two runs did identical work.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn


class Block(nn.Module):
    """Pre-norm transformer block with causal self-attention."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int, seq: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self.mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        n = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(n))
        mask = self.mask[:n, :n]
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="timed optimizer steps (default 200)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=256)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model = TinyGPT(args.vocab, args.dim, args.layers, args.heads, args.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    loss_fn = nn.CrossEntropyLoss()
    # A fixed synthetic corpus, so every run sees the same batches in the same order.
    corpus = torch.randint(0, args.vocab, (64, args.batch, args.seq + 1))

    def step(i: int) -> float:
        chunk = corpus[i % len(corpus)]
        x, y = chunk[:, :-1], chunk[:, 1:]
        logits = model(x)
        loss = loss_fn(logits.reshape(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.detach())

    for i in range(args.warmup):
        step(i)
    loss = float("nan")
    start = time.perf_counter()
    for i in range(args.warmup, args.warmup + args.steps):
        loss = step(i)
    loop_s = time.perf_counter() - start
    result = {
        "loop_s": loop_s,
        "steps": args.steps,
        "step_ms": 1000.0 * loop_s / max(args.steps, 1),
        "loss": loss,
        "threads": torch.get_num_threads(),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

"""Models trained on CPU: the workloads of benchmarks/overhead.py and hook_cost.py.

`--model` picks one (the shape options override its defaults):

* gpt (default): a small GPT-style model (dim 64, 6 blocks, batch 16; ~40 ms steps). Many
  small modules (embedding, pre-norm attention blocks, MLPs, AdamW) make each step a long
  chain of short PyTorch calls, so Python-level interference from a profiler (GIL hand-offs,
  a woken thread, a busy second core) shows up here before it would in a few large matmuls;
* tiny: the same architecture cut down to one block of width 16, batch 2, 16 tokens
  (~1 ms steps): the profiler's fixed cost per step shows here as a percentage;
* small: an MLP of 8 x Linear(256) with ReLUs, batch 64, Adam (a few ms per step).

The training loop alone is timed with time.perf_counter; interpreter start, `import torch`
and model construction are left out, so the number compares plain and profiled runs fairly.
The last stdout line is a JSON object:

    {"loop_s": ..., "steps": ..., "step_ms": ..., "loss": ..., "threads": ..., "model": ...,
     "vm_hwm": ..., "pid": ...}

`loss` is bit-for-bit reproducible for the same arguments and thread count, which lets the
caller check that two runs did identical work. `vm_hwm` is the process's peak RSS in bytes
(the kernel's high-water mark, read at the end), `pid` its process id: benchmarks/peers.py
tells the workload apart from a profiler's own processes with them.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import torch
from peak_rss import vm_hwm_bytes
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


# Shape of each model: batch, seq, dim, layers (seq unused by the MLP).
MODELS: dict[str, dict[str, int]] = {
    "gpt": {"batch": 16, "seq": 64, "dim": 64, "layers": 6},
    "tiny": {"batch": 2, "seq": 16, "dim": 16, "layers": 1},
    "small": {"batch": 64, "seq": 0, "dim": 256, "layers": 8},
}


def add_model_args(p: argparse.ArgumentParser) -> None:
    """--model and the shape options that override its defaults (None: the model's)."""
    p.add_argument("--model", choices=sorted(MODELS), default="gpt", help="default gpt")
    for name in ("batch", "seq", "dim", "layers"):
        p.add_argument(f"--{name}", type=int, default=None, help="default: the model's")


def shape(args: argparse.Namespace) -> dict[str, int]:
    """The model's shape with the options given on the command line applied."""
    return {k: getattr(args, k, None) or v for k, v in MODELS[args.model].items()}


Step = Callable[[int], torch.Tensor]


def make_step(args: argparse.Namespace) -> tuple[Step, Step]:
    """The training step of args.model, as step(i) -> the loss (a detached tensor), and its
    forward alone, as forward(i) -> the model's output (autograd on, no loss, no backward).

    Seeds torch: the same arguments give the same model, batches and losses.
    """
    torch.manual_seed(0)
    dims = shape(args)
    vocab = 256
    loss_fn = nn.CrossEntropyLoss()
    if args.model == "small":
        width = dims["dim"]
        layers: list[nn.Module] = []
        for i in range(dims["layers"]):
            layers += [nn.Linear(width, width)] + ([nn.ReLU()] if i < dims["layers"] - 1 else [])
        mlp = nn.Sequential(*layers)
        opt: torch.optim.Optimizer = torch.optim.Adam(mlp.parameters(), lr=1e-3)
        # A fixed synthetic data set, so every run sees the same batches in the same order.
        inputs = torch.randn(16, dims["batch"], width)
        labels = torch.randint(0, width, (16, dims["batch"]))

        def step_mlp(i: int) -> torch.Tensor:
            loss = loss_fn(mlp(inputs[i % len(inputs)]), labels[i % len(labels)])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss.detach()

        def forward_mlp(i: int) -> torch.Tensor:
            return mlp(inputs[i % len(inputs)])

        return step_mlp, forward_mlp
    seq = dims["seq"]
    model = TinyGPT(vocab, dims["dim"], dims["layers"], 4, seq)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    corpus = torch.randint(0, vocab, (64, dims["batch"], seq + 1))

    def step_gpt(i: int) -> torch.Tensor:
        chunk = corpus[i % len(corpus)]
        x, y = chunk[:, :-1], chunk[:, 1:]
        logits = model(x)
        loss = loss_fn(logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    def forward_gpt(i: int) -> torch.Tensor:
        return model(corpus[i % len(corpus)][:, :-1])

    return step_gpt, forward_gpt


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="timed optimizer steps (default 200)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    add_model_args(p)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    train_step, _ = make_step(args)

    def step(i: int) -> float:
        return float(train_step(i))

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
        "model": args.model,
        "vm_hwm": vm_hwm_bytes(),
        "pid": os.getpid(),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

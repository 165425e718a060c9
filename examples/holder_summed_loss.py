"""Evaluation sums loss tensors, not numbers, with autograd on: one small tensor keeps the graph
of every batch, and with it every batch's saved activations.

memsight findings: growth-per-iteration, naming `total` (a tensor, local of `evaluate()`, whose
autograd graph holds the memory) and the line `total += loss_fn(model(x), y)`;
inference-without-no-grad.
Fix: `total += loss.item()` under `torch.no_grad()`.
"""
# memsight-expect: growth-per-iteration, inference-without-no-grad
# memsight-where: total | total += loss_fn(model(x), y)

import torch
from torch import nn


def evaluate(model: nn.Module, batches: int) -> float:
    model.eval()
    loss_fn = nn.MSELoss()
    total = torch.zeros(())
    for _ in range(batches):
        x, y = torch.randn(256, 256), torch.randn(256, 1024)
        total += loss_fn(model(x), y)  # the bug: a tensor with its graph, under autograd
    return float(total) / batches


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024))
    print(f"validation loss {evaluate(model, 150):.4f}")


if __name__ == "__main__":
    main()

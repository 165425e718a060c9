"""A local list in a training function, two calls deep, keeps every step's output alive.

memsight finding: growth-per-iteration, naming `kept` (a list, local of `train()`) and the line
`kept.append(logits)` that adds to it.
Fix: keep `logits.detach()`, a number (`.item()`), or nothing.
"""
# memsight-expect: growth-per-iteration
# memsight-where: kept | kept.append(logits)

import torch
from torch import nn


def train(model: nn.Module, steps: int) -> int:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    for _step in range(steps):
        x = torch.randn(256, 256)
        logits = model(x)
        loss = logits.pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        kept.append(logits)  # the bug: 2 MiB per step, with its graph
    return len(kept)


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 2048))
    print("kept", train(model, 80))


if __name__ == "__main__":
    main()

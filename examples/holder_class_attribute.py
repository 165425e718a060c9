"""A cache kept in a class attribute (shared by every instance) grows by one output per step.

memsight finding: growth-per-iteration, naming `Predictions.cache` (a dict class attribute) and
the line that stores into it.
Fix: bound the cache, store detached CPU copies or numbers, or clear it every epoch.
"""
# memsight-expect: growth-per-iteration
# memsight-where: Predictions.cache | Predictions.cache[step] = logits

from typing import ClassVar

import torch
from torch import nn


class Predictions:
    cache: ClassVar[dict[int, torch.Tensor]] = {}


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 2048))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(80):
        logits = model(torch.randn(256, 256))
        loss = logits.pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        Predictions.cache[step] = logits  # the bug: every step's output, with its graph
    print("cached", len(Predictions.cache))


if __name__ == "__main__":
    main()

"""A deque nested in a dict of metrics, a module global, keeps every step's output alive.

memsight finding: growth-per-iteration, naming `metrics["outputs"]` (a deque in the global
dict `metrics`) and the line `metrics["outputs"].append(logits)`.
Fix: log `logits.detach()` or a number, and give the deque a maxlen.
"""
# memsight-expect: growth-per-iteration
# memsight-where: metrics | metrics["outputs"].append(logits)

from collections import deque

import torch
from torch import nn

metrics: dict[str, deque[torch.Tensor]] = {"outputs": deque(), "losses": deque(maxlen=10)}


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 2048))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _step in range(80):
        logits = model(torch.randn(256, 256))
        loss = logits.pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        metrics["losses"].append(loss.detach())  # bounded, detached: fine
        metrics["outputs"].append(logits)  # the bug: unbounded, with graphs
    print("kept", len(metrics["outputs"]))


if __name__ == "__main__":
    main()

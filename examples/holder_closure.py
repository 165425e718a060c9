"""A logging callback keeps what it is given in a list its closure captured.

memsight finding: growth-per-iteration, naming `seen` (a list in the closure of `log()`) and
the line `seen.append(value)`.
Fix: log `value.detach()` or a number (`.item()`).
"""
# memsight-expect: growth-per-iteration
# memsight-where: seen | seen.append(value)

from collections.abc import Callable

import torch
from torch import nn


def make_logger() -> Callable[[torch.Tensor], None]:
    seen: list[torch.Tensor] = []

    def log(value: torch.Tensor) -> None:
        seen.append(value)  # the bug: the tensor, with its graph

    return log


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 2048))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    log = make_logger()
    for _step in range(80):
        logits = model(torch.randn(256, 256))
        loss = logits.pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        log(logits)
    print("done")


if __name__ == "__main__":
    main()

"""A trainer object's attribute, `self.history`, keeps every step's output alive.

memsight finding: growth-per-iteration, naming `Trainer.history` (a list attribute) and the line
`self.history.append(logits)`.
Fix: keep `logits.detach()` or a number (`.item()`).
"""
# memsight-expect: growth-per-iteration
# memsight-where: Trainer.history | self.history.append(logits)

import torch
from torch import nn


class Trainer:
    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        self.history: list[torch.Tensor] = []

    def step(self, x: torch.Tensor) -> float:
        logits = self.model(x)
        loss = logits.pow(2).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.history.append(logits)  # the bug: 2 MiB per step, with its graph
        return loss.item()


def main() -> None:
    torch.manual_seed(0)
    trainer = Trainer(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 2048)))
    for step in range(80):
        loss = trainer.step(torch.randn(256, 256))
        if step % 40 == 0:
            print(f"step {step} loss {loss:.3f}", flush=True)


if __name__ == "__main__":
    main()

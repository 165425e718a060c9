"""LBFGS with a closure that clears gradients, as PyTorch documents it.

`--leak`: every closure's features are kept.
"""

import sys

import torch
from torch import nn

LEAK = "--leak" in sys.argv
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Sequential(nn.Linear(512, 512), nn.Tanh())
        self.head = nn.Linear(512, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.hidden(x)
        return self.head(features), features


model = Net()
x, y = torch.randn(1024, 512), torch.randn(1024, 1)
# A short history: L-BFGS keeps history_size past steps, a cache that fills once.
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=2, history_size=5)
kept: list[torch.Tensor] = []
for _step in range(40):

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        prediction, features = model(x)
        loss = nn.functional.mse_loss(prediction, y)
        loss.backward()  # type: ignore[no-untyped-call]
        if LEAK:
            kept.append(features)  # 1024 x 512 floats per call, kept for "later analysis"
        return loss

    loss = optimizer.step(closure)  # type: ignore[no-untyped-call]
print("loss", round(float(loss), 3))

"""A training loop on a torch.compile'd model."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 128))
compiled = torch.compile(model, backend="eager")
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _step in range(40):
    x = torch.randn(64, 128)
    loss = (compiled(x) - x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("loss", round(float(loss), 3))

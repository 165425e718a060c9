"""Hand-written SGD without torch.optim, as pytorch/examples' word_language_model does.

`--leak`: every step's logits are kept, with their graph.
"""

import sys

import torch
from torch import nn

LEAK = "--leak" in sys.argv
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512))
kept = []
for _step in range(60):
    x = torch.randn(512, 512)
    logits = model(x)
    loss = (logits - x).pow(2).mean()
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            assert p.grad is not None
            p.data.add_(p.grad, alpha=-0.01)
    if LEAK:
        kept.append(logits)
print("loss", round(float(loss), 3))

"""LBFGS with a closure that clears gradients, as PyTorch documents it.

`--leak`: every closure's output is kept with its graph.
"""

import sys

import torch
from torch import nn

LEAK = "--leak" in sys.argv
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 1))
x, y = torch.randn(1024, 512), torch.randn(1024, 1)
# A short history: L-BFGS keeps history_size past steps, a cache that fills once.
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=2, history_size=5)
kept = []
for _step in range(40):

    def closure():
        optimizer.zero_grad()
        hidden = model(x)
        loss = nn.functional.mse_loss(hidden, y)
        loss.backward()
        if LEAK:
            kept.append(hidden)  # its graph holds the Tanh's 1024 x 512 output
        return loss

    loss = optimizer.step(closure)
print("loss", round(float(loss), 3))

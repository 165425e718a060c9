"""Calls backward() and step() but never clears the gradients.

memsight finding: missing-zero-grad (every step adds to all earlier steps' gradients).
Fix: `optimizer.zero_grad(set_to_none=True)` before each backward.
"""
# memsight-expect: missing-zero-grad

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)

for step in range(40):
    x = torch.randn(32, 64)
    loss = (model(x) - 1.0).pow(2).mean()
    loss.backward()  # the bug: no zero_grad, so .grad keeps summing
    optimizer.step()
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.3f}", flush=True)

"""Clean control: LBFGS with a closure that clears the gradients, as PyTorch documents it.

`optimizer.zero_grad()` runs inside the closure, after the step began (the same shape as every
PyTorch Lightning run). That clears every step: memsight must not report missing-zero-grad,
nor anything else of severity warning or worse.
"""
# memsight-expect: none

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 256))
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=2, history_size=10)
x, y = torch.randn(1024, 16), torch.randn(1024, 256)

for step in range(60):

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    loss = optimizer.step(closure)
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.4f}", flush=True)

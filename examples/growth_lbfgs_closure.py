"""LBFGS with a closure, as PyTorch documents it, whose closure keeps every prediction.

The closure clears the gradients itself (`optimizer.zero_grad()` inside it, after the step
began): that is a cleared step, not missing-zero-grad. What grows is the list: LBFGS
evaluates the closure twice per step here, and each evaluation's output stays.

memsight finding: growth-per-iteration (RAM climbs by the same amount every optimizer step).
Fix: keep `out.detach()` only when needed, or a number (`loss.item()`).
"""
# memsight-expect: growth-per-iteration

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 256))
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=2, history_size=10)
x, y = torch.randn(1024, 16), torch.randn(1024, 256)
predictions = []

for step in range(60):

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        out = model(x)
        loss = nn.functional.mse_loss(out, y)
        loss.backward()
        predictions.append(out)  # the bug: 1 MiB per evaluation, kept for the whole run
        return loss

    loss = optimizer.step(closure)
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.4f}", flush=True)

"""Clean control: gradient accumulation over 4 micro-batches, cleared after each step.

Several backward passes feed each optimizer step on purpose; memsight must not mistake this
for a missing zero_grad.
"""
# memsight-expect: none

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
accumulate = 4

for micro_step in range(160):
    x = torch.randn(32, 64)
    loss = (model(x) - 1.0).pow(2).mean() / accumulate
    loss.backward()
    if (micro_step + 1) % accumulate == 0:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if micro_step % 40 == 0:
        print(f"micro-step {micro_step} loss {loss.item() * accumulate:.3f}", flush=True)

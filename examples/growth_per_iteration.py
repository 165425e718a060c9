"""Keeps every iteration's output alive by storing it, graph and all, for "later analysis".

memsight finding: growth-per-iteration (RAM climbs by the same amount every step).
Fix: store `logits.detach()` (or a metric computed with `.item()`), or nothing at all.
"""
# memsight-expect: growth-per-iteration
# memsight-where: kept_outputs | kept_outputs.append(logits)

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 2048))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()
kept_outputs = []

for step in range(120):
    x = torch.randn(512, 256)
    y = torch.randint(0, 2048, (512,))
    logits = model(x)
    loss = loss_fn(logits, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    kept_outputs.append(logits)  # the bug: 4 MiB per step, kept with its graph
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.3f}", flush=True)

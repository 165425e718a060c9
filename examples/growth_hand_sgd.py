"""Hand-written SGD without torch.optim, keeping every step's logits "for later analysis".

The weights are updated by hand, as pytorch/examples' word_language_model does it, so there
are no optimizer steps: memsight counts each backward pass as an iteration and reads memory
between them from its samples.

memsight finding: growth-per-iteration (RAM climbs by the same amount every backward pass).
Fix: keep `logits.detach()` (or a metric computed with `.item()`), or nothing at all.
"""
# memsight-expect: growth-per-iteration

import time

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 512))
criterion = nn.CrossEntropyLoss()
lr = 0.05
kept_logits = []

for step in range(100):
    time.sleep(0.01)  # stands in for loading the batch
    x, y = torch.randn(1024, 16), torch.randint(0, 512, (1024,))
    logits = model(x)
    loss = criterion(logits, y)
    model.zero_grad()
    loss.backward()
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
    kept_logits.append(logits)  # the bug: 2 MiB per step, kept for the whole run
    if step % 25 == 0:
        print(f"step {step} loss {loss.item():.3f}", flush=True)

"""Clean control: hand-written SGD without torch.optim, done right.

The weights are updated by hand under no_grad and the gradients dropped (`p.grad = None`);
only the loss's value is kept. memsight counts each backward pass as an iteration: the level
between them stays flat, so nothing of severity warning or worse may be reported.
"""
# memsight-expect: none

import time

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 512))
criterion = nn.CrossEntropyLoss()
lr = 0.05
losses = []

for step in range(100):
    time.sleep(0.01)  # stands in for loading the batch
    x, y = torch.randn(1024, 16), torch.randint(0, 512, (1024,))
    loss = criterion(model(x), y)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
            p.grad = None
    losses.append(loss.item())  # a number, not a tensor
    if step % 25 == 0:
        print(f"step {step} loss {losses[-1]:.3f}", flush=True)

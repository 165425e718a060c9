"""Scores a large batch in one go; the peak comes close to the RAM budget given to memsight.

Run it as: memsight run --ram-budget 1.25GiB examples/near_capacity.py
memsight finding: near-capacity (the process tree's peak within 10 % of the budget, or over
it). The budget stands in for the machine this has to run on; without --ram-budget the check
is against the cgroup limit or the machine's RAM.
"""
# memsight-expect: near-capacity
# memsight-options: --ram-budget 1.25GiB

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512)).eval()

with torch.inference_mode():
    for chunk in range(3):
        x = torch.randn(196608, 512)  # 384 MiB; the hidden layer and output as much again
        scores = model(x).sum(dim=1)
        print(f"chunk {chunk} mean score {scores.mean().item():.4f}", flush=True)
        del x, scores

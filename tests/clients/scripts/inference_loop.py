"""An inference loop under no_grad.

`--leak`: outputs are cached in a dict keyed by batch, never evicted.
"""

import sys

import torch
from torch import nn

LEAK = "--leak" in sys.argv
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512)).eval()
cache = {}
total = 0.0
with torch.no_grad():
    for batch in range(60):
        x = torch.randn(1024, 512)
        out = model(x)
        if LEAK:
            cache[batch] = out.clone()
        total += float(out.sum())
print("done", len(cache))

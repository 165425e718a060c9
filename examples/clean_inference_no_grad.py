"""Clean control: batch inference under torch.no_grad() that keeps only what it needs.

The model and a softmax module run per batch (one iteration per batch); only each row's top
class is kept, as Python ints. memsight must report nothing of severity warning or worse.

(Keeping the top classes as small tensors instead, `probs.argmax(dim=1)`, looks as clean but
often is not on the CPU: small tensors kept between the large ones that come and go pin holes
in the C allocator's heap, RSS then climbs by up to 2 MiB per batch here, and memsight reports
that growth.)
"""
# memsight-expect: none

import time

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 512)).eval()
softmax = nn.Softmax(dim=1)
predictions: list[int] = []

with torch.no_grad():
    for batch in range(100):
        time.sleep(0.01)  # stands in for loading the batch
        x = torch.randn(1024, 16)
        probs = softmax(model(x))
        predictions.extend(probs.argmax(dim=1).tolist())  # numbers, not tensors
        if batch % 25 == 0:
            print(f"batch {batch} top class {predictions[-1]}", flush=True)
print(f"{len(predictions)} predictions")

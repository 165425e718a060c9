"""Batch inference under torch.no_grad() that keeps every batch's full output.

No optimizer and no backward: memsight counts each batch as an iteration (the model and the
softmax module called per batch count once) and reads memory between batches from its
samples. no_grad keeps the graph away, but the outputs themselves pile up.

memsight finding: growth-per-iteration (RAM climbs by the same amount every batch).
Fix: keep what you need of each output (`probs.argmax(dim=1)`, a top-k, a score), or write
the outputs to disk as you go.
"""
# memsight-expect: growth-per-iteration

import time

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 512)).eval()
softmax = nn.Softmax(dim=1)
outputs = []

with torch.no_grad():
    for batch in range(100):
        time.sleep(0.01)  # stands in for loading the batch
        x = torch.randn(1024, 16)
        probs = softmax(model(x))
        outputs.append(probs)  # the bug: 2 MiB per batch, kept for the whole run
        if batch % 25 == 0:
            print(f"batch {batch} top class {int(probs[0].argmax())}", flush=True)
print(f"{len(outputs)} batches scored")

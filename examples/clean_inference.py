"""Clean control: batch inference the recommended way, in eval mode under inference_mode.

memsight must report nothing of severity warning or worse.
"""
# memsight-expect: none

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10)).eval()
predictions = []
with torch.inference_mode():
    for _batch in range(50):
        x = torch.randn(256, 128)
        predictions.append(model(x).argmax(dim=1))  # small integer tensors, no graph
print(f"{sum(len(p) for p in predictions)} predictions")

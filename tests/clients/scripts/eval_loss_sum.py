"""An evaluation loop that sums its loss tensors (the FAQ's leak) without no_grad.

Every batch's loss joins one running total, which holds every batch's graph.
"""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10)).eval()
criterion = nn.CrossEntropyLoss()
total = torch.zeros(())
for _batch in range(60):
    x, y = torch.randn(512, 512), torch.randint(0, 10, (512,))
    total = total + criterion(model(x), y)  # the leak: loss tensors, not loss.item()
print("mean loss", round(float(total) / 60, 2))

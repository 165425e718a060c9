"""Trains briefly, then evaluates with model.eval() but without torch.no_grad().

memsight finding: inference-without-no-grad (eval forwards record a graph nobody uses).
Fix: wrap evaluation in `with torch.no_grad():` (or `torch.inference_mode()`).
"""
# memsight-expect: inference-without-no-grad

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()

for _step in range(30):
    x, y = torch.randn(64, 128), torch.randint(0, 10, (64,))
    loss = loss_fn(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

model.eval()  # the bug: eval() alone does not turn autograd off
correct = 0
for _batch in range(20):
    x, y = torch.randn(256, 128), torch.randint(0, 10, (256,))
    correct += int((model(x).argmax(dim=1) == y).sum())
print(f"accuracy {correct / (20 * 256):.3f}")

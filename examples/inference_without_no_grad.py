"""Trains briefly, then evaluates with model.eval() but without torch.no_grad().

memsight finding: inference-without-no-grad (eval forwards record a graph nobody uses). Each
evaluation batch keeps the activations its backward would need, over 100 MiB here, until its
output is dropped: a warning, with the memory it cost.
Fix: wrap evaluation in `with torch.no_grad():` (or `torch.inference_mode()`).
"""
# memsight-expect: inference-without-no-grad
# memsight-where: | correct += int((model(x).argmax(dim=1) == y).sum())  # 32 MiB per activation, kept

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(16, 1024), nn.GELU(), nn.Tanh(), nn.Sigmoid(), nn.GELU(), nn.Linear(1024, 10)
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()

for _step in range(30):
    x, y = torch.randn(64, 16), torch.randint(0, 10, (64,))
    loss = loss_fn(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

model.eval()  # the bug: eval() alone does not turn autograd off
correct = 0
for _batch in range(10):
    x, y = torch.randn(8192, 16), torch.randint(0, 10, (8192,))
    correct += int((model(x).argmax(dim=1) == y).sum())  # 32 MiB per activation, kept
print(f"accuracy {correct / (10 * 8192):.3f}")

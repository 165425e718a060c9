"""A training script whose loop header was commented out for a quick test, leaving its `break`.

Python refuses the whole file before running a single line ("SyntaxError: 'break' outside
loop"), so nothing of the model is ever measured. memsight finding: run-failed (critical), the
SyntaxError with the file and line Python names, instead of "no problems found".
"""
# memsight-expect: run-failed

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(64, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
# for step in range(1000):  # commented out for a quick test
loss = model(torch.randn(32, 64)).pow(2).mean()
optimizer.zero_grad(set_to_none=True)
loss.backward()
optimizer.step()
if loss.item() < 1e-3:
    break  # noqa: F701 - the mistake this example is about: Python rejects the file for it

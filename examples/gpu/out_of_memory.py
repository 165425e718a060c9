"""Full attention over a sequence far too long for any GPU, after a few normal steps.

memsight finding: out-of-memory (critical): torch.OutOfMemoryError in forward, with how much
was asked for, what was free and what PyTorch held at that moment.
"""
# memsight-expect: out-of-memory

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return (q @ k.transpose(-2, -1)).softmax(dim=-1) @ v


torch.manual_seed(0)
model = Attention(16).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step, length in enumerate([256] * 5 + [2**18]):  # the last: a 256 GiB score matrix
    x = torch.randn(1, length, 16, device="cuda")
    loss = model(x).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    print(f"step {step} length {length} loss {loss.item():.4f}", flush=True)

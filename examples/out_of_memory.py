"""A model whose forward asks for far more memory than any machine has, after a few steps.

memsight findings: out-of-memory (critical), with the phase and iteration where it happened,
and activations-dominate (info): the failing step's memory is activations, not the model.
On a GPU the same mistake raises torch.OutOfMemoryError; here the CPU allocator refuses.
"""
# memsight-expect: out-of-memory, activations-dominate
# memsight-where: | return (q @ k.transpose(-2, -1)).softmax(dim=-1) @ v

import torch
from torch import nn


class Attention(nn.Module):
    """Full attention over a sequence that suddenly becomes enormous."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return (q @ k.transpose(-2, -1)).softmax(dim=-1) @ v


torch.manual_seed(0)
model = Attention(64)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step, length in enumerate([128] * 5 + [2**19]):  # the last: a 2^19 x 2^19 score matrix, 1 TiB
    x = torch.randn(1, length, 64)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    print(f"step {step} length {length} loss {loss.item():.4f}", flush=True)

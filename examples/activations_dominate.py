"""A small, wide model trained on a huge batch: activations dwarf the model's own state.

memsight finding: activations-dominate (info). The peak is mostly what forward keeps for
backward, so activation checkpointing, a smaller batch or mixed precision move the peak;
a smaller optimizer would not.
"""
# memsight-expect: activations-dominate

import torch
from torch import nn

torch.manual_seed(0)
width = 256
model = nn.Sequential(*[layer for _ in range(6) for layer in (nn.Linear(width, width), nn.GELU())])
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

for step in range(8):
    x = torch.randn(65536, width)  # 64 MiB per activation, a dozen kept for backward
    loss = model(x).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}", flush=True)

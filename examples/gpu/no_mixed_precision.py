"""A wide MLP trained in float32 on a large batch: activations dwarf the model.

memsight findings: activations-dominate and no-mixed-precision (both info). Fix: autocast to
bfloat16 (or float16 with GradScaler), activation checkpointing, or a smaller batch.
"""
# memsight-expect: activations-dominate, no-mixed-precision

import torch
from torch import nn

torch.manual_seed(0)
width = 4096
model = nn.Sequential(
    *[layer for _ in range(4) for layer in (nn.Linear(width, width), nn.GELU())]
).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

for step in range(10):
    x = torch.randn(65536, width, device="cuda")  # 1 GiB per activation
    loss = model(x).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}", flush=True)

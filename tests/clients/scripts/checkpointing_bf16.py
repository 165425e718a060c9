"""Gradient checkpointing and bf16 autocast on CPU in one training loop."""

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(256, 256), nn.GELU()) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x


model = Net()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _step in range(40):
    x = torch.randn(64, 256)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
print("loss", round(float(loss), 3))

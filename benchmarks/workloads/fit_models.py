"""A training loop of one of three models at a given batch size, for fit_projection.py.

    python fit_models.py mlp|cnn|transformer BATCH STEPS [cpu|cuda]

mlp: four wide Linear layers with ReLU (activations grow with the batch, the weights do not);
cnn: three convolutions with batch norm on 64x64 images; transformer: four pre-norm blocks
(multi-head attention and an MLP) over 128 tokens with a 2,048-token vocabulary, the loss
on the logits. AdamW; one intra-op thread, so that runs compare.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

KIND, BATCH, STEPS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
DEVICE = sys.argv[4] if len(sys.argv) > 4 else "cpu"
torch.manual_seed(0)
torch.set_num_threads(1)
SEQUENCE, VOCABULARY, WIDTH = 128, 2048, 256


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(WIDTH)
        self.attn = nn.MultiheadAttention(WIDTH, 4, batch_first=True)
        self.ln2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(
            nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class Transformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCABULARY, WIDTH)
        self.position = nn.Parameter(torch.zeros(SEQUENCE, WIDTH))
        self.blocks = nn.ModuleList(Block() for _ in range(4))
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCABULARY)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        out: torch.Tensor = self.head(self.ln(x))
        return out


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    if KIND == "mlp":
        inputs, targets = torch.randn(BATCH, 1024), torch.randint(0, 10, (BATCH,))
    elif KIND == "cnn":
        inputs, targets = torch.randn(BATCH, 3, 64, 64), torch.randint(0, 10, (BATCH,))
    else:
        inputs = torch.randint(0, VOCABULARY, (BATCH, SEQUENCE))
        targets = torch.randint(0, VOCABULARY, (BATCH, SEQUENCE))
    return inputs.to(DEVICE), targets.to(DEVICE)


if KIND == "mlp":
    model: nn.Module = nn.Sequential(
        nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
        nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10),
    )  # fmt: skip
elif KIND == "cnn":
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(1024, 10),
    )  # fmt: skip
else:
    model = Transformer()
model.to(DEVICE)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for _ in range(STEPS):
    inputs, targets = batch()
    logits = model(inputs)
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

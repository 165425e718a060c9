"""Three more models for fit_projection.py --heldout: not used to build the projection's model
of what malloc keeps, so they check it.

    python fit_models_heldout.py lstm|resnet|gpt2 BATCH STEPS [cpu|cuda]

lstm: a two-layer LSTM language model (width 512) over 64 tokens of a 4,096-token vocabulary;
resnet: four residual blocks of 48 channels (convolution, batch norm, convolution) on 48x48
images; gpt2: Hugging Face's GPT2LMHeadModel built from a config in code (4 layers of 256, 128
tokens, 8,192-token vocabulary; needs the clients extra), its loss from `labels`. AdamW, one
intra-op thread, as fit_models.py.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

KIND, BATCH, STEPS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
DEVICE = sys.argv[4] if len(sys.argv) > 4 else "cpu"
torch.manual_seed(0)
torch.set_num_threads(1)
VOCABULARY = {"lstm": 4096, "gpt2": 8192}.get(KIND, 0)


class LanguageModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCABULARY, 256)
        self.rnn = nn.LSTM(256, 512, num_layers=2, batch_first=True)
        self.head = nn.Linear(512, VOCABULARY)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.rnn(self.embedding(tokens))
        out: torch.Tensor = self.head(hidden)
        return out


class Residual(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.conv2(torch.relu(self.norm(self.conv1(x))))
        return out


def loss_of(model: nn.Module) -> torch.Tensor:
    """One batch through the model, and its loss."""
    if KIND == "lstm":
        tokens = torch.randint(0, VOCABULARY, (BATCH, 64), device=DEVICE)
        targets = torch.randint(0, VOCABULARY, (BATCH, 64), device=DEVICE)
        logits = model(tokens)
        return nn.functional.cross_entropy(logits.reshape(-1, VOCABULARY), targets.reshape(-1))
    if KIND == "resnet":
        images = torch.randn(BATCH, 3, 48, 48, device=DEVICE)
        labels = torch.randint(0, 10, (BATCH,), device=DEVICE)
        return nn.functional.cross_entropy(model(images), labels)
    tokens = torch.randint(0, VOCABULARY, (BATCH, 128), device=DEVICE)
    loss: torch.Tensor = model(input_ids=tokens, labels=tokens).loss
    return loss


def build() -> nn.Module:
    if KIND == "lstm":
        return LanguageModel()
    if KIND == "resnet":
        return nn.Sequential(
            nn.Conv2d(3, 48, 3, padding=1), *[Residual(48) for _ in range(4)],
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(48, 10),
        )  # fmt: skip
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=4, n_head=4, n_embd=256, n_positions=256, vocab_size=VOCABULARY)
    gpt: nn.Module = GPT2LMHeadModel(config)
    return gpt


model = build().to(DEVICE)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for _ in range(STEPS):
    loss = loss_of(model)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

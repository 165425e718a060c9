"""Clean control: a small GPT-style language model trained the way the docs recommend.

DataLoader workers over a numpy-backed dataset, AdamW, zero_grad(set_to_none=True) every step,
the loss logged with .item(), evaluation every 40 steps under torch.no_grad() in eval mode.
memsight must report nothing of severity warning or worse.
"""
# memsight-expect: none

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

VOCAB, CONTEXT, WIDTH = 512, 64, 128


class TokenWindows(Dataset):
    """Fixed-length windows over one token array: shared with the workers, never copied."""

    def __init__(self, tokens: np.ndarray) -> None:
        self.tokens = tokens

    def __len__(self) -> int:
        return len(self.tokens) - CONTEXT - 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        window = torch.from_numpy(self.tokens[i : i + CONTEXT + 1].astype(np.int64))
        return window[:-1], window[1:]


class TinyGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Parameter(torch.zeros(CONTEXT, WIDTH))
        layer = nn.TransformerEncoderLayer(WIDTH, 4, 4 * WIDTH, dropout=0.1, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(WIDTH, VOCAB)
        mask = torch.triu(torch.full((CONTEXT, CONTEXT), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.position
        return self.head(self.blocks(h, mask=self.mask, is_causal=True))


def evaluate(model: nn.Module, valid: DataLoader, loss_fn: nn.Module, batches: int = 4) -> float:
    model.eval()
    losses = []
    with torch.no_grad():
        for i, (x, y) in enumerate(valid):
            if i == batches:
                break
            losses.append(loss_fn(model(x).flatten(0, 1), y.flatten()).item())
    model.train()
    return sum(losses) / len(losses)


def main() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, size=200_000, dtype=np.int16)
    train = DataLoader(TokenWindows(tokens[:180_000]), batch_size=32, shuffle=True, num_workers=2)
    valid = DataLoader(TokenWindows(tokens[180_000:]), batch_size=64)
    model = TinyGPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(2):
        for step, (x, y) in enumerate(train, start=1):
            loss = loss_fn(model(x).flatten(0, 1), y.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if step % 40 == 0:
                valid_loss = evaluate(model, valid, loss_fn)
                print(
                    f"epoch {epoch} step {step} loss {loss.item():.3f} valid {valid_loss:.3f}",
                    flush=True,
                )
            if step == 80:
                break


if __name__ == "__main__":
    main()

"""A training run of a given length, for long_run.py: an MLP trained on batches from a
DataLoader with worker processes, a step every `--step-ms` milliseconds (the rest of the time
asleep, so a run of hours keeps the machine mostly free), memory flat as a healthy run's is.

    python long_train.py --seconds 7200 [--step-ms 50] [--workers 2]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Noise(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Endless random samples (a fixed length the sampler cycles through)."""

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(256), torch.randint(0, 10, ())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, required=True, help="how long to train")
    p.add_argument("--step-ms", type=float, default=50.0, help="one step this often (50)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers (2)")
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(
        Noise(), batch_size=32, num_workers=args.workers, persistent_workers=args.workers > 0
    )
    end = time.monotonic() + args.seconds
    steps = 0
    next_step = time.monotonic()
    while time.monotonic() < end:
        for inputs, targets in loader:
            loss = nn.functional.cross_entropy(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
            next_step += args.step_ms / 1000
            time.sleep(max(0.0, next_step - time.monotonic()))
            if time.monotonic() >= end:
                break
    print(f"{steps} steps, loss {loss.item():.3f}")


if __name__ == "__main__":
    main()

"""Inference under torch.no_grad() fed by a DataLoader with worker processes: a workload of
benchmarks/peers.py.

A small convolutional network (eval mode) classifies synthetic 3x32x32 images in batches of
--batch, read through `torch.utils.data.DataLoader(num_workers=--workers)` (2 by default,
forked: the workers are child processes of the script, as in most training and evaluation
scripts). Each item is generated from its index with its own seeded generator, so every run
sees the same data whichever worker makes it; the outputs are summed into a checksum.

The loop alone is timed with time.perf_counter (the workers' start included: they start
when the loop asks for the first batch). The last stdout line is a JSON object:

    {"loop_s": ..., "batches": ..., "batch_ms": ..., "checksum": ..., "workers": ...,
     "vm_hwm": ..., "pid": ...}

`vm_hwm` is the main process's peak RSS in bytes (the kernel's high-water mark, read at the
end; the workers' memory is not in it), `pid` its process id.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from peak_rss import vm_hwm_bytes
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset[tuple[torch.Tensor, int]]):
    """`length` images of 3x32x32, each a function of its index alone."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        gen = torch.Generator().manual_seed(index)
        return torch.randn(3, 32, 32, generator=gen), index % 10


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    ).eval()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=100, help="batches to run (default 100)")
    p.add_argument("--batch", type=int, default=64, help="images per batch (default 64)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    model = make_model()
    loader = DataLoader(
        SyntheticImages(args.batches * args.batch),
        batch_size=args.batch,
        num_workers=args.workers,
    )
    checksum = 0.0
    batches = 0
    start = time.perf_counter()
    with torch.no_grad():
        for images, _labels in loader:
            checksum += float(model(images).sum())
            batches += 1
    loop_s = time.perf_counter() - start
    result = {
        "loop_s": loop_s,
        "batches": batches,
        "batch_ms": 1000.0 * loop_s / max(batches, 1),
        "checksum": checksum,
        "workers": args.workers,
        "vm_hwm": vm_hwm_bytes(),
        "pid": os.getpid(),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

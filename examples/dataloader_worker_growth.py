"""A dataset held as a list of Python lists, read by two DataLoader workers.

memsight finding: dataloader-worker-growth. Reading a Python object writes its reference
count, so each forked worker copies the pages it reads: its own memory climbs through the
epoch. Fix: hold the samples in one numpy array (or Arrow table, or tensor) instead.
"""
# memsight-expect: dataloader-worker-growth

import time

import torch
from torch.utils.data import DataLoader, Dataset


class PythonObjectDataset(Dataset):
    def __init__(self, samples: int, features: int) -> None:
        # the bug: millions of small Python floats, shared with the workers only until read
        self.rows = [[float(i + j) for j in range(features)] for i in range(samples)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.001)  # stands in for reading and decoding a sample from disk
        return torch.tensor(self.rows[index])


if __name__ == "__main__":
    dataset = PythonObjectDataset(samples=10_000, features=1_000)
    loader = DataLoader(dataset, batch_size=64, num_workers=2, shuffle=False)
    total = 0.0
    for batch in loader:
        total += float(batch.sum())
    print(f"read {len(dataset)} samples, checksum {total:.3e}")

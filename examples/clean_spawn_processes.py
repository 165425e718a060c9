"""Clean control: two processes started with torch.multiprocessing.spawn, each training a model.

Each spawned process starts a fresh interpreter and imports torch, so its own memory climbs by
a few hundred MiB in its first seconds, as torchrun ranks do. They are not DataLoader workers:
memsight records them as child processes of role "other" and the dataloader-worker-growth rule
leaves them alone. memsight must report nothing of severity warning or worse.
"""
# memsight-expect: none

import torch
import torch.multiprocessing as mp
from torch import nn


def train(rank: int, steps: int) -> None:
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data, target = torch.randn(512, 64), torch.randn(512, 1)
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(data), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    print(f"rank {rank}: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    mp.spawn(train, args=(200,), nprocs=2, join=True)

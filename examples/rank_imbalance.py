"""rank-imbalance: rank 0 of a two-process data-parallel job keeps everything it collects.

Two processes started with torch.multiprocessing.spawn train the same model with DDP (gloo,
CPU). After every step from step 10 on, rank 0 alone keeps a 20 MiB tensor, as a script
does that gathers every rank's outputs into rank 0 for evaluation or logging and never drops
them. Rank 0 ends about 600 MiB above rank 1, which memsight reports for rank 0, with the
step where it started to pull away; and since rank 0 grows every step, growth-per-iteration
fires for rank 0 too, naming `collected` as what keeps the memory.
"""
# memsight-expect: rank-imbalance, growth-per-iteration

import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def train(rank: int, world: int, store: str) -> None:
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.parallel.DistributedDataParallel(nn.Linear(128, 128))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    collected = []
    for step in range(40):
        loss = model(torch.randn(32, 128)).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if rank == 0 and step >= 10:
            collected.append(torch.ones(5 * 1024 * 1024))  # 20 MiB kept on rank 0 only
    dist.barrier()
    print(f"rank {rank}: kept {len(collected)} tensors", flush=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # gloo's threads can abort a normal interpreter exit in torch 2.13


if __name__ == "__main__":
    store = os.path.join(tempfile.mkdtemp(), "store")
    mp.spawn(train, args=(2, store), nprocs=2, join=True)

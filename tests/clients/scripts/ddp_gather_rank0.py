"""DDP with gloo on 2 ranks where rank 0 keeps what it gathers: from step 10 on, every rank's
5 MiB of outputs are gathered to rank 0 (dist.gather), which appends them to a list and never
frees them (the "collect predictions for the metric on rank 0" pattern), 300 MiB by the end.
Launched by torchrun; memsight's rank-imbalance names rank 0 and the iteration it pulls away."""

import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()
world = dist.get_world_size()
torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
kept: list[torch.Tensor] = []
for step in range(40):
    x = torch.randn(32, 128)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step >= 10:
        outputs = torch.full((5 * 1024 * 1024 // 4,), float(step))  # 5 MiB of float32
        if rank == 0:
            received = [torch.empty_like(outputs) for _ in range(world)]
            dist.gather(outputs, received, dst=0)
            kept.extend(received)
        else:
            dist.gather(outputs, dst=0)
dist.barrier()
if rank == 0:
    print("kept", len(kept), "tensors")
dist.destroy_process_group()
# As ddp_gloo.py: skip interpreter finalization, where torch 2.13's gloo threads can abort.
sys.stdout.flush()
os._exit(0)

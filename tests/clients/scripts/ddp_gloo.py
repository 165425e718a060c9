"""DDP with the gloo backend, launched by torchrun on 2 ranks."""

import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _step in range(30):
    x = torch.randn(32, 128)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
dist.barrier()
if rank == 0:
    print("world", dist.get_world_size(), "local", os.environ["LOCAL_RANK"])
dist.destroy_process_group()
# Skip interpreter finalization: torch 2.13's gloo worker threads can take the GIL while
# Python shuts down and abort the process (std::terminate), about one run in five here.
sys.stdout.flush()
os._exit(0)

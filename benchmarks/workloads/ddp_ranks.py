"""One rank of a DDP job (gloo, CPU) for benchmarks/job_overhead.py, started by torchrun.

Trains a small MLP for --seconds of wall time (every rank stops at the same step: rank 0
decides when and tells the others through the all-reduce), then rank 0 prints one JSON line
with the steps taken.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=20.0)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
torch.set_num_threads(1)
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
start = time.monotonic()
steps = 0
stop = torch.zeros(1)
while True:
    loss = model(torch.randn(64, 256)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    steps += 1
    stop.fill_(1.0 if rank == 0 and time.monotonic() - start >= args.seconds else 0.0)
    dist.all_reduce(stop)
    if stop.item() > 0:
        break
if rank == 0:
    print(json.dumps({"steps": steps, "seconds": time.monotonic() - start}))
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # torch 2.13's gloo threads can abort a normal interpreter exit

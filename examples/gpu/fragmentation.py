"""Requests whose sizes keep changing leave the caching allocator with holes it cannot reuse.

200 buffers of 24 MiB, every other one freed, then 70 buffers of 40 MiB: the 24 MiB holes
are too small, so the allocator reserves new segments while 2.3 GiB sits reserved but
unallocated. The same happens with batches whose sequence length grows.
memsight finding: fragmentation. Fix: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.
"""
# memsight-expect: fragmentation

import time

import torch

MiB = 2**20
small = [torch.empty(24 * MiB, dtype=torch.uint8, device="cuda") for _ in range(200)]
time.sleep(0.2)
del small[::2]  # frees 100 holes of 24 MiB
time.sleep(0.2)
large = [torch.empty(40 * MiB, dtype=torch.uint8, device="cuda") for _ in range(70)]
time.sleep(0.5)
stats = torch.cuda.memory_stats()
gap = stats["reserved_bytes.all.current"] - stats["allocated_bytes.all.current"]
print(f"reserved but unallocated: {gap / MiB:.0f} MiB", flush=True)

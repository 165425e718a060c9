"""Holds about 93 % of the GPU's memory in a cache of activations for a while.

memsight finding: near-capacity: reserved memory within 10 % of the device's capacity.
"""
# memsight-expect: near-capacity

import time

import torch

free, total = torch.cuda.mem_get_info()
chunk = 256 * 2**20
wanted = int(0.93 * total) - torch.cuda.memory_reserved()
cache = [torch.empty(chunk, dtype=torch.uint8, device="cuda") for _ in range(wanted // chunk)]
time.sleep(1.0)
print(f"holding {len(cache) * chunk / 2**30:.1f} GiB of {total / 2**30:.1f} GiB", flush=True)

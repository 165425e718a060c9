"""Trains while another process holds 12 GiB (or a fifth of a larger card) of the same GPU.

memsight finding: non-pytorch-gpu-memory: the device's used memory is far above what this
process's PyTorch reserved (the rule asks for a tenth of the device, so the other process's
share is sized from the card). The other process is started detached (as a separate job would
be), holds its memory for a while and exits on its own.
"""
# memsight-expect: non-pytorch-gpu-memory

import os
import subprocess
import sys
import tempfile
import time

import torch
from torch import nn

HOLDER = """
import sys, time, torch
block = torch.empty(max(12 * 2**30, torch.cuda.mem_get_info()[1] // 5), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
open(sys.argv[1], "w").close()
time.sleep(float(sys.argv[2]))
"""

ready = os.path.join(tempfile.mkdtemp(), "ready")
# Double fork: the holder is not our child, like another user's job on a shared GPU.
subprocess.run(
    [
        sys.executable,
        "-c",
        "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True)",
        sys.executable,
        "-I",  # isolated, like another user's job: none of this run's environment reaches it
        "-c",
        HOLDER,
        ready,
        "20",
    ],
    check=True,
)
while not os.path.exists(ready):
    time.sleep(0.1)

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
end = time.monotonic() + 8
step = 0
while time.monotonic() < end:
    x = torch.randn(256, 1024, device="cuda")
    loss = model(x).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    step += 1
print(f"{step} steps next to the other process", flush=True)

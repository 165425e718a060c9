"""Moves the whole dataset to the GPU before training and keeps it there.

memsight finding: dataset-on-device: a tenth of the device (at least 4 GiB) allocated before the
first forward, besides the parameters, held for the whole run. Fix: keep it on the CPU (pinned)
and move each batch. (The rule asks for 5 % of the device: on a 140 GiB card a 4 GiB dataset
is not worth a warning, so the dataset is sized from the card.)
"""
# memsight-expect: dataset-on-device

import torch
from torch import nn

torch.manual_seed(0)
_, total = torch.cuda.mem_get_info()
rows = max(1 << 20, total // 10 // (1024 * 4))  # 4 KiB a row of 1024 float32
features = torch.randn(rows, 1024, device="cuda")  # the bug: the whole dataset on the device
labels = torch.randint(0, 10, (rows,), device="cuda")
model = nn.Sequential(nn.Linear(1024, 256), nn.ReLU(), nn.Linear(256, 10)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()

for step in range(200):
    index = torch.randint(0, len(features), (512,), device="cuda")
    loss = loss_fn(model(features[index]), labels[index])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.3f}", flush=True)

"""Clean control: a feature cache that fills during the first third of training, then stays.

Memory climbs for 60 steps and then holds steady. That is a cache doing its job, not a leak:
memsight must not report growth-per-iteration (or anything of severity warning or worse).
"""
# memsight-expect: none

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()
feature_cache: dict[int, torch.Tensor] = {}  # one entry per distinct shard, 60 shards


def features(shard: int) -> torch.Tensor:
    if shard not in feature_cache:
        generator = torch.Generator().manual_seed(shard)
        feature_cache[shard] = torch.randn(4096, 256, generator=generator)  # 4 MiB each
    return feature_cache[shard]


for step in range(200):
    x = features(step % 60)[:512]
    y = torch.randint(0, 10, (512,))
    loss = loss_fn(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.3f} cached {len(feature_cache)}", flush=True)

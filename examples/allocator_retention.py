"""Clean training whose RAM still climbs: glibc's malloc keeps the memory the loop frees.

Two DataLoader workers feed a small model. Nothing is kept from one step to the next, yet the
main process's RSS climbs by up to a MiB per step under plain python too: the memory is free
inside malloc's heaps, kept for reuse (malloc_trim(0) gives it back). memsight reads malloc's
own counts: when the climb passes the growth tests it says so as an info (allocator-retention),
never as a leak. How far RSS climbs varies from run to run (malloc sometimes gives a part
back), so the info may not come in every run. With MALLOC_TRIM_THRESHOLD_=1048576 in the
environment the climb is gone.
"""
# memsight-expect: allocator-retention?

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(TensorDataset(torch.randn(4096, 512)), batch_size=128, num_workers=2)
    step = 0
    for epoch in range(4):
        for (x,) in loader:
            loss = (model(x) - x).pow(2).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
        print(f"epoch {epoch}: step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()

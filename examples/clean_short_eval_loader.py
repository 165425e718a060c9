"""Clean control: training with a short evaluation every 20 steps, read by its own workers.

The evaluation DataLoader starts two workers that live a fraction of a second; each loads a
lookup table of 48 MiB when it starts (worker_init_fn). memsight finds these workers, measures
them while they live and counts their memory in the process tree's peak. Nothing is wrong
here: memsight must report nothing of severity warning or worse.
"""
# memsight-expect: none

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, get_worker_info

TABLE_BYTES = 48 * 1024 * 1024


class Validation(Dataset):
    def __init__(self, samples: int) -> None:
        self.inputs = torch.randn(samples, 32)
        self.table: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> torch.Tensor:
        assert self.table is not None
        return self.inputs[index] + float(self.table[index])


def load_table(worker_id: int) -> None:
    info = get_worker_info()
    assert info is not None
    info.dataset.table = np.full(TABLE_BYTES // 8, 0.5 + worker_id)  # this worker's own copy


def evaluate(model: nn.Module, valid: DataLoader) -> float:
    model.eval()
    with torch.no_grad():
        total = sum(float(model(x).sum()) for x in valid)
    model.train()
    return total


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    valid = DataLoader(Validation(512), batch_size=128, num_workers=2, worker_init_fn=load_table)
    data, target = torch.randn(256, 32), torch.randn(256, 1)
    for step in range(1, 101):
        loss = nn.functional.mse_loss(model(data), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step}: loss {loss.item():.4f} valid {evaluate(model, valid):.2f}")


if __name__ == "__main__":
    main()

"""A DataLoader worker killed by SIGKILL, as the Linux OOM killer ends one.

memsight finding: child-killed (and run-failed: the training loop then stops on
"DataLoader worker (pid N) exited unexpectedly", or on torch's own "is killed by signal").
One of the two forked workers is ended with SIGKILL, the signal the OOM killer sends, so the
run ends as a real out-of-RAM worker does without needing a machine to fill.
memsight names the worker, its peak RAM before it died and what to check (`dmesg`), and
suggests fewer workers or a dataset kept in flat arrays.
"""
# memsight-expect: child-killed, run-failed

import os
import signal

import torch
from torch.utils.data import DataLoader, Dataset


class HeavyDataset(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 40:
            # stands in for the OOM killer: it sends this very signal
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.full((16,), float(index))


if __name__ == "__main__":
    model = torch.nn.Linear(16, 1)
    loader = DataLoader(HeavyDataset(), batch_size=4, num_workers=2)
    with torch.no_grad():
        for batch in loader:
            model(batch)
    print("done")

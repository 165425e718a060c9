"""Clean control: dataloader_copy_on_access.py with the records held in flat numpy arrays.

The same 400k caption records, the same two persistent workers reading shuffled batches for
three epochs, but stored as three arrays (fixed-width bytes and integers) instead of a dict of
tuples of strings: reading them writes no reference count, so the pages stay shared and each
worker's own memory stays small. memsight must report nothing of severity warning or worse.
"""
# memsight-expect: none

import numpy as np
import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

RECORDS = 400_000


class Captions(Dataset):
    def __init__(self, records: int) -> None:
        ids = np.arange(records)
        # the fix: one buffer per field, whatever the number of records
        self.paths = np.char.add(np.char.add("images/", np.char.zfill(ids.astype("U7"), 7)), ".jpg")
        self.paths = self.paths.astype(np.bytes_)
        captions = np.char.add("a photo of object number ", ids.astype("U7"))
        self.captions = np.char.add(captions, " on a wooden table").astype(np.bytes_)
        self.labels = ids % 10

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        rows = np.asarray(indices)  # one batch of records per call
        labels = self.labels[rows]
        features = np.stack(
            [np.char.str_len(self.paths[rows]), np.char.str_len(self.captions[rows]), labels / 10],
            axis=1,
        )
        return torch.from_numpy(features.astype(np.float32)), torch.from_numpy(labels)


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a tiny model: leave the other cores to the two workers
    dataset = Captions(RECORDS)
    batches = BatchSampler(RandomSampler(dataset), batch_size=4000, drop_last=False)
    loader = DataLoader(
        dataset, sampler=batches, batch_size=None, num_workers=2, persistent_workers=True
    )
    model = nn.Linear(3, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(3):
        for features, labels in loader:
            loss = nn.functional.cross_entropy(model(features), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()

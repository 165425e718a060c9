"""A caption dataset held as a dict of Python objects, read by two DataLoader workers.

memsight finding: dataloader-worker-growth. Each forked worker starts out sharing the dict with
the main process, but reading a record writes the reference counts of its objects, which copies
the pages that hold them: every worker's own memory (USS) rises while its RSS stays flat, until
it has touched the whole dict, then holds that plateau: the records are now in memory three
times. Fix: keep them in flat numpy arrays (clean_dataloader_arrays.py is the same loop).
"""
# memsight-expect: dataloader-worker-growth

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

RECORDS = 400_000


class Captions(Dataset):
    def __init__(self, records: int) -> None:
        # the bug: a million small Python objects (tuples, strings, floats), shared with the
        # workers only until they are read
        self.items = {
            i: (f"images/{i:07d}.jpg", f"a photo of object number {i} on a wooden table", i % 10)
            for i in range(records)
        }

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        records = [self.items[i] for i in indices]  # one batch of records per call
        features = torch.tensor([[len(p), len(c), y / 10] for p, c, y in records])
        return features, torch.tensor([y for _, _, y in records])


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

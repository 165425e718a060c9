"""A multiprocessing.Process whose work raises after it started: the parent carries on.

memsight finding: child-failed, naming the child, the exception, its message and its line.
The child prints its traceback and exits with status 1; the script itself ends normally
(multiprocessing does not raise in the parent), so without the finding the lost work would go
unnoticed. Fix: check each child's exitcode after join().
"""
# memsight-expect: child-failed
# memsight-where: | raise ValueError(f"shard {shard} is corrupt")

import multiprocessing as mp

import torch


def prepare(shard: int) -> None:
    data = torch.randn(256, 1024)  # some work first
    checksum = float(data.sum())
    if shard == 1:
        raise ValueError(f"shard {shard} is corrupt")
    print(f"shard {shard} ready ({checksum:.1f})", flush=True)


if __name__ == "__main__":
    context = mp.get_context("fork")
    workers = [context.Process(target=prepare, args=(shard,)) for shard in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print("done")

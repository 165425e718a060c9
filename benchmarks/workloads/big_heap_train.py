"""A CPU training loop in a process that holds millions of small Python objects.

The workload of benchmarks/census_cost.py's `--big-heap` case under `memsight run`: what the
censuses of a script with a large heap cost it. The script first takes one training step (a
sanity check of the model), then builds, in module globals (what a census walks from its
roots):

* `dataset`: a tokenised dataset kept in memory, a list of `--objects` / 2 records, each a
  tuple `(doc_id, token_ids)` with `token_ids` a list of 6 small ints: `--objects` Python
  objects that gc tracks (default 5,000,000: about 600 MiB); the last 4 records hold a
  tensor of features (1 MiB) instead of the list, which only a census that reads the whole
  list finds;
* `kept`: a few tensors kept across steps (8 x 4 MiB of float32);

then trains cpu_train.py's "small" MLP (8 x Linear(512), batch 128, Adam: ~30 ms steps on the
2-core VM) for `--steps` steps, or for `--seconds` if given. Each step is timed on its own: a
census slice pauses the loop between two steps, so it shows as one long step.

The first step comes before the data so that the agent's censuses are taken at the loop's
iterations, in the loop's thread (census_schedule.py). With `--data-first` the data is built
first: memsight's agent, seeing no iteration yet, then takes its first censuses on the clock
from its own thread during the build, before the timed loop.

The last stdout line is a JSON object:

    {"loop_s", "steps", "step_ms", "step_p50_ms", "step_max_ms", "slow_steps" (steps over
     --slow-ms, each [index, ms], at most 200), "loss", "objects", "build_s", "vm_hwm", "pid"}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import torch
from cpu_train import make_step
from peak_rss import vm_hwm_bytes

dataset: list[tuple[int, Any]] = []
kept: list[torch.Tensor] = []
TAIL = 4  # last records of the dataset holding a tensor


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--objects",
        type=int,
        default=5_000_000,
        help="Python objects in the dataset (2 a record; default 5000000)",
    )
    p.add_argument("--steps", type=int, default=1000, help="timed optimizer steps (default 1000)")
    p.add_argument("--seconds", type=float, default=None, help="train this long instead of --steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument(
        "--data-first",
        action="store_true",
        help="build the data before the first step (censuses on the clock during the build)",
    )
    p.add_argument(
        "--slow-ms", type=float, default=120.0, help="a step this long is listed (default 120)"
    )
    return p.parse_args()


def build(objects: int) -> None:
    """The dataset and the kept tensors, in this module's globals."""
    records = max(TAIL, objects // 2)
    dataset.extend((i, [i % 251, 7, 42, 3, 99, 17]) for i in range(records - TAIL))
    dataset.extend((i, torch.zeros(1 << 18)) for i in range(records - TAIL, records))
    kept.extend(torch.zeros(1 << 20) for _ in range(8))


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    # cpu_train's "small" MLP, wider: ~30 ms steps.
    model_args = argparse.Namespace(model="small", batch=128, seq=None, dim=512, layers=8)
    train_step, _ = make_step(model_args)
    if not args.data_first:
        train_step(0)  # a sanity step of the model before the data is loaded
    began = time.perf_counter()
    build(args.objects)
    build_s = time.perf_counter() - began
    for i in range(args.warmup):
        train_step(i)
    loss = float("nan")
    times: list[float] = []
    i = args.warmup
    start = time.perf_counter()
    end = None if args.seconds is None else start + args.seconds
    while (len(times) < args.steps) if end is None else (time.perf_counter() < end):
        t0 = time.perf_counter()
        loss = float(train_step(i))
        times.append(time.perf_counter() - t0)
        i += 1
    loop_s = time.perf_counter() - start
    slow = [[n, t * 1e3] for n, t in enumerate(times) if t * 1e3 > args.slow_ms]
    result: dict[str, Any] = {
        "loop_s": loop_s,
        "steps": len(times),
        "step_ms": 1e3 * loop_s / max(len(times), 1),
        "step_p50_ms": 1e3 * statistics.median(times) if times else 0.0,
        "step_max_ms": 1e3 * max(times, default=0.0),
        "slow_steps": slow[:200],
        "loss": loss,
        "objects": args.objects,
        "build_s": build_s,
        "threads": torch.get_num_threads(),
        "vm_hwm": vm_hwm_bytes(),
        "pid": os.getpid(),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

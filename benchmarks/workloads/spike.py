"""Short memory spikes on CPU: the workload of benchmarks/peak_capture.py.

Repeatedly allocates a tensor of --mib MiB with torch.ones (every page written, so it is
resident, not just reserved), holds it for --hold-ms, frees it and pauses for a random
0.5x..1.5x --pause-ms, so spikes fall at random phases of an outside sampler's ticks.

The true height is measured here, from inside: /proc/self/statm is read while the tensor is
held. The last stdout line is a JSON object:

    {"true_peak_rss": bytes, "baseline_rss": bytes, "vm_hwm": bytes, "spikes": [[start_ns,
     end_ns, rss_bytes], ...], "fill_ms_median": ..., "seconds": ..., "loop_s": ..., "pid": ...}

With --count N it stops after N spikes instead of after --seconds, so two runs do the same
work and loop_s (the time from the first allocation to the last pause's end) compares them.

start_ns/end_ns are time.monotonic_ns() just before the allocation and just after the free:
the same clock the recorder stamps its samples with.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time

import torch
from peak_rss import vm_hwm_bytes

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes(statm: int) -> int:
    return int(os.pread(statm, 256, 0).split()[1]) * PAGE


def hold(seconds: float) -> None:
    # Busy-wait: time.sleep() overshoots by up to a scheduler tick, which would widen the
    # spike and make it easier to catch than the nominal 2 ms.
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=128, help="spike size in MiB (default 128)")
    p.add_argument(
        "--hold-ms", type=float, default=2.0, help="how long each spike is held (default 2)"
    )
    p.add_argument(
        "--pause-ms", type=float, default=60.0, help="mean pause between spikes (default 60)"
    )
    p.add_argument(
        "--seconds", type=float, default=5.0, help="how long to keep spiking (default 5)"
    )
    p.add_argument(
        "--count",
        type=int,
        default=None,
        help="stop after this many spikes instead of after --seconds",
    )
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    rng = random.Random(args.seed)
    torch.set_num_threads(1)
    n = args.mib * 1024 * 1024
    statm = os.open("/proc/self/statm", os.O_RDONLY)
    baseline = rss_bytes(statm)
    spikes: list[list[int]] = []
    fills: list[float] = []
    started = time.perf_counter()
    deadline = time.monotonic() + args.seconds
    while len(spikes) < args.count if args.count is not None else time.monotonic() < deadline:
        start = time.monotonic_ns()
        tensor = torch.ones(n, dtype=torch.uint8)
        filled = time.monotonic_ns()
        held = rss_bytes(statm)
        hold(args.hold_ms / 1000.0)
        held = max(held, rss_bytes(statm))
        del tensor
        end = time.monotonic_ns()
        spikes.append([start, end, held])
        fills.append((filled - start) / 1e6)
        time.sleep(args.pause_ms / 1000.0 * rng.uniform(0.5, 1.5))
    loop_s = time.perf_counter() - started
    result = {
        "true_peak_rss": max(s[2] for s in spikes),
        "baseline_rss": baseline,
        "vm_hwm": vm_hwm_bytes(),
        "mib": args.mib,
        "hold_ms": args.hold_ms,
        "fill_ms_median": statistics.median(fills),
        "seconds": args.seconds,
        "spikes": spikes,
        "loop_s": loop_s,
        "pid": os.getpid(),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

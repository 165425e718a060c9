"""A plain-Python script that keeps one core busy for --seconds: the workload of
benchmarks/throughput.py part (a).

It builds and drops lists and byte buffers of varying size, so RSS moves and the sampler has
something to record, without torch (a fast start, so nearly the whole run is sampled).
The last stdout line is a JSON object: {"seconds": ..., "rounds": ...}.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="how long to run (default 10)")
    args = p.parse_args()
    deadline = time.monotonic() + args.seconds
    rounds = 0
    held: list[bytearray] = []
    while time.monotonic() < deadline:
        data = [i * i for i in range(20_000)]
        held.append(bytearray(len(data) * (1 + rounds % 64)))
        if len(held) > 32:
            held.clear()
        rounds += 1
    print(json.dumps({"seconds": args.seconds, "rounds": rounds}), flush=True)


if __name__ == "__main__":
    main()

"""child_sampling: how often each DataLoader-like worker's USS is read, and what it costs.

Target (performance issue): each worker's USS refreshed at least twice a second, within 2 %
of one core, for 8 workers of 1 GiB each. USS (the pages only that worker maps) is read from
/proc/PID/smaps_rollup, which walks the worker's page tables: its cost grows with the
worker's resident memory, so large workers are where the budget binds.

The script forks `--workers` processes that each write every page of `--gib` GiB of private
memory, then hold it, idle, for `--seconds`; memsight records it at the default interval.
Read back from the profile: each worker's USS readings (rows of the `children` table) and
the gaps between them once the worker's memory is all written. The recorder's CPU time is
read from /proc/PID/stat of the `memsight run` process (its own threads only, not the
target's) just before it ends, for this run and for a baseline run of the same length
without workers: the difference is what sampling the workers costs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import memsight_cmd, percentile, print_table, verdict, write_result
from memsight.profiler.profile.storage import load_profile

REFRESH_TARGET_HZ = 2.0
CPU_TARGET_PERCENT = 2.0
WORKERS = """
import os, sys, time
workers, gib, seconds = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
pids = []
for _ in range(workers):
    pid = os.fork()
    if pid == 0:
        block = bytearray(int(gib * 2**30))
        for i in range(0, len(block), 4096):
            block[i] = 1  # every page resident and private to this worker
        print("filled", flush=True)
        time.sleep(seconds)
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
if not workers:
    time.sleep(seconds)  # the baseline: the same run, with nothing to sample but the target
"""


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of one process (its threads, not its children), from /proc/PID/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def recorder_cpu(
    script: Path, out: Path, workers: int, gib: float, seconds: float
) -> tuple[float, float]:
    """(CPU seconds of the `memsight run` process, wall seconds) for one recorded run."""
    cmd = memsight_cmd(script, out, [str(workers), str(gib), str(seconds)], options=["-q"])
    started = time.monotonic()
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    cpu = 0.0
    while process.poll() is None:
        reading = cpu_seconds(process.pid)
        if reading is not None:
            cpu = reading
        time.sleep(0.1)
    if process.returncode != 0:
        raise RuntimeError(f"memsight run exited with {process.returncode}")
    return cpu, time.monotonic() - started


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=8, help="worker processes (default 8)")
    p.add_argument("--gib", type=float, default=1.0, help="GiB each worker holds (default 1)")
    p.add_argument("--seconds", type=float, default=20.0, help="how long they hold it (20)")
    args = p.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="memsight-child-sampling-"))
    script = folder / "workers.py"
    script.write_text(WORKERS)
    out = folder / "run.memsight"
    cpu, wall = recorder_cpu(script, out, args.workers, args.gib, args.seconds)
    base_cpu, base_wall = recorder_cpu(script, folder / "base.memsight", 0, 0, args.seconds)
    cpu_percent = 100 * (cpu / wall - base_cpu / base_wall)

    profile = load_profile(out)
    children = profile.table("children")
    if children is None or not len(children):
        raise RuntimeError("no worker readings in the profile")
    gaps: list[float] = []
    readings: list[int] = []
    full = int(args.gib * 2**30 * 0.95)
    for pid in sorted(set(int(v) for v in children["pid"])):
        mine = children["pid"] == pid
        t, uss = children.t[mine], children["uss"][mine]
        held = t[uss >= full]  # once the worker's memory is all written
        readings.append(len(held))
        gaps += list(held[1:] - held[:-1])
    if not gaps:
        raise RuntimeError("no worker reached its full size in the readings")
    rate = 1 / statistics.median(gaps)
    worst_gap = max(gaps)
    passed = bool(rate >= REFRESH_TARGET_HZ and cpu_percent <= CPU_TARGET_PERCENT)
    print_table(
        ["measure", "value", "target"],
        [
            ["workers", f"{args.workers} x {args.gib:g} GiB, {args.seconds:g} s", ""],
            ["USS readings per worker (held)", f"{statistics.median(readings):.0f}", ""],
            ["gap between readings, median", f"{statistics.median(gaps) * 1000:.0f} ms", ""],
            [
                "gap, p95 / worst",
                f"{percentile(gaps, 95) * 1000:.0f} / {worst_gap * 1000:.0f} ms",
                "",
            ],
            ["refresh rate per worker", f"{rate:.2f} Hz", f"≥ {REFRESH_TARGET_HZ:g} Hz"],
            [
                "recorder CPU, whole / without workers",
                f"{100 * cpu / wall:.1f} % / {100 * base_cpu / base_wall:.1f} %",
                "",
            ],
            [
                "sampling the workers (% of a core)",
                f"{cpu_percent:.1f} %",
                f"≤ {CPU_TARGET_PERCENT:g} %",
            ],
        ],
        title="child_sampling",
    )
    line = verdict(
        "child_sampling",
        passed,
        f"{rate:.2f} Hz per worker (≥ {REFRESH_TARGET_HZ:g}), sampling them {cpu_percent:.1f} %"
        f" of a core (≤ {CPU_TARGET_PERCENT:g}), {args.workers} x {args.gib:g} GiB",
    )
    write_result(
        "child_sampling",
        {
            "target": {"refresh_hz": REFRESH_TARGET_HZ, "cpu_percent": CPU_TARGET_PERCENT},
            "passed": passed,
            "verdict": line,
            "workers": args.workers,
            "gib": args.gib,
            "seconds": args.seconds,
            "gaps_s": [float(gap) for gap in gaps],
            "recorder_cpu_s": cpu,
            "wall_s": wall,
            "baseline_recorder_cpu_s": base_cpu,
            "baseline_wall_s": base_wall,
        },
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())

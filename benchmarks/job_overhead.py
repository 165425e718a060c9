"""What each extra process of a job costs the recorder: CPU and memory, 1 to 8 torchrun ranks.

Target: per extra rank, the recorder (the `memsight run` process itself, not the job) spends at
most 2 % of one core and 16 MiB of memory at the default interval (10 ms).

Each run is `memsight run -m torch.distributed.run --nproc_per_node N workloads/ddp_ranks.py`
(DDP, gloo, CPU; every rank trains a small MLP for --seconds). Meanwhile the recorder process
is read every 100 ms: its own CPU time (user + system, its children excluded) and its peak RSS
(VmHWM). Per extra rank is the difference to the 1-rank run divided by N - 1. The job's steps
and the profile's size are shown beside them. On a 2-core VM 8 ranks overload the machine:
the ranks slow down, and the recorder's share is measured on its own process regardless.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from _common import (
    WORKLOADS,
    last_json_line,
    mib,
    peak_rss_of,
    print_table,
    verdict,
    write_result,
)

NAME = "job_overhead"
TARGET_CPU_SHARE = 0.02  # of one core, per extra rank
TARGET_MEMORY_MIB = 16.0  # per extra rank


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--ranks", default="1,2,4,8", help="job sizes, comma-separated (default 1,2,4,8)"
    )
    p.add_argument("--seconds", type=float, default=20.0, help="training time per run (default 20)")
    return p.parse_args()


def run_job(ranks: int, seconds: float, folder: Path) -> dict[str, Any]:
    out = folder / f"job{ranks}.memsight"
    argv = [
        sys.executable, "-m", "memsight.profiler.cli", "run", "-q", "--out", str(out),
        "-m", "torch.distributed.run", "--nproc_per_node", str(ranks),
        str(WORKLOADS / "ddp_ranks.py"), "--seconds", str(seconds),
    ]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    recorder = psutil.Process(proc.pid)
    cpu_s, rss = 0.0, 0
    while proc.poll() is None:
        try:
            times = recorder.cpu_times()
            cpu_s = times.user + times.system
            rss = peak_rss_of(proc.pid) or rss
        except psutil.Error:
            break
        time.sleep(0.1)
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"the {ranks}-rank job failed ({proc.returncode}):\n{stderr[-2000:]}")
    from memsight.profiler.profile.storage import load_profile

    profile = load_profile(out)
    recorded = [p for p in profile.subprocesses.values() if p.process.role == "rank"]
    if len(recorded) != ranks:
        raise RuntimeError(f"{len(recorded)} of {ranks} ranks recorded")
    return {
        "ranks": ranks,
        "wall_s": wall,
        "recorder_cpu_s": cpu_s,
        "recorder_peak_rss": rss,
        "steps": last_json_line(stdout)["steps"],
        "profile_bytes": os.path.getsize(out),
    }


def main() -> int:
    args = parse_args()
    sizes = sorted({int(n) for n in args.ranks.split(",")})
    if sizes[0] != 1 or len(sizes) < 2:
        raise SystemExit("--ranks must include 1 and at least one larger job")
    with tempfile.TemporaryDirectory() as folder:
        runs = [run_job(n, args.seconds, Path(folder)) for n in sizes]
    base = runs[0]
    rows = []
    worst_cpu, worst_mem = -1.0, -float("inf")
    for run in runs:
        share = run["recorder_cpu_s"] / run["wall_s"]
        per_cpu = per_mem = None
        if run["ranks"] > 1:
            extra = run["ranks"] - 1
            per_cpu = (share - base["recorder_cpu_s"] / base["wall_s"]) / extra
            per_mem = mib(run["recorder_peak_rss"] - base["recorder_peak_rss"]) / extra
            worst_cpu, worst_mem = max(worst_cpu, per_cpu), max(worst_mem, per_mem)
        run["recorder_cpu_share"] = share
        run["per_extra_rank_cpu_share"] = per_cpu
        run["per_extra_rank_memory_mib"] = per_mem
        rows.append(
            [
                run["ranks"],
                f"{run['wall_s']:.1f}",
                f"{100 * share:.2f} %",
                f"{mib(run['recorder_peak_rss']):.0f}",
                "" if per_cpu is None else f"{100 * per_cpu:+.2f} %",
                "" if per_mem is None else f"{per_mem:+.1f}",
                run["steps"],
                f"{mib(run['profile_bytes']):.1f}",
            ]
        )
    print_table(
        ["ranks", "wall s", "recorder CPU", "recorder MiB", "CPU/extra rank",
         "MiB/extra rank", "steps", "profile MiB"],
        rows,
        title=f"memsight run of a torchrun job, {args.seconds:g} s of training per run",
    )  # fmt: skip
    passed = worst_cpu <= TARGET_CPU_SHARE and worst_mem <= TARGET_MEMORY_MIB
    verdict(
        NAME,
        passed,
        f"per extra rank at most {100 * worst_cpu:.2f} % of a core "
        f"(target {100 * TARGET_CPU_SHARE:g} %) and {worst_mem:+.1f} MiB "
        f"(target {TARGET_MEMORY_MIB:g} MiB)",
    )
    write_result(NAME, {"seconds": args.seconds, "runs": runs, "passed": passed})
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())

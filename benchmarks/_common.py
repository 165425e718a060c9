"""Helpers shared by the benchmark scripts: running memsight, reading JSON lines, reporting.

Benchmarks run memsight through the interpreter that runs them (``python -m profiler.cli``),
so a benchmark started from a virtualenv measures that virtualenv's memsight and torch.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
WORKLOADS = BENCH_DIR / "workloads"


@dataclass
class ProcessResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float  # the whole process, interpreter start and memsight's own work included
    # CPU seconds that other processes on the machine used while this one ran (None where
    # /proc/stat is unavailable): a shared machine's load, which timings cannot tell apart.
    background_cpu_s: float | None = None
    cpu_s: float | None = None  # CPU time of the process and every descendant it waited for

    @property
    def background_cores(self) -> float | None:
        """Average number of cores busy with other work while this process ran."""
        if self.background_cpu_s is None or self.wall_s <= 0:
            return None
        return max(0.0, self.background_cpu_s) / self.wall_s


def peak_rss_of(pid: int) -> int | None:
    """A process's peak RSS so far (VmHWM, kept by the kernel), in bytes; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def machine_busy_s() -> float | None:
    """CPU seconds every core has spent busy (or stolen by the hypervisor) since boot."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice: already in user]
    busy = sum(fields[i] for i in (0, 1, 2, 5, 6, 7) if i < len(fields))
    return busy / os.sysconf("SC_CLK_TCK")


def _own_and_children_cpu_s() -> float:
    """CPU time of this process and of every child (and their descendants) it waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_process(
    argv: Sequence[str], timeout: float | None = None, env: Mapping[str, str] | None = None
) -> ProcessResult:
    busy_before, ours_before = machine_busy_s(), _own_and_children_cpu_s()
    start = time.perf_counter()
    proc = subprocess.run(
        list(argv),
        cwd=REPO_ROOT,
        env=None if env is None else dict(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    wall = time.perf_counter() - start
    busy_after = machine_busy_s()
    ours = _own_and_children_cpu_s() - ours_before
    background = None
    if busy_before is not None and busy_after is not None:
        background = busy_after - busy_before - ours
    result = ProcessResult(
        list(argv), proc.returncode, proc.stdout, proc.stderr, wall, background, ours
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"command failed with status {proc.returncode}: {' '.join(argv)}\n"
            f"--- stdout ---\n{proc.stdout[-2000:]}\n--- stderr ---\n{proc.stderr[-2000:]}"
        )
    return result


def python_cmd(script: Path, args: Sequence[str] = ()) -> list[str]:
    return [sys.executable, str(script), *args]


def memsight_cmd(
    script: Path,
    out: Path,
    args: Sequence[str] = (),
    interval_ms: float | None = None,
    options: Sequence[str] = (),
) -> list[str]:
    cmd = [sys.executable, "-m", "memsight.profiler.cli", "run", "--out", str(out), *options]
    if interval_ms is not None:
        cmd += ["--interval-ms", f"{interval_ms:g}"]
    return [*cmd, str(script), *args]


def last_json_line(stdout: str) -> dict[str, Any]:
    """The last stdout line that is a JSON object: what a workload reports about itself."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj
    raise ValueError(f"no JSON result line in the workload's output:\n{stdout[-2000:]}")


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) without needing numpy."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def mib(n: float) -> float:
    return n / (1024 * 1024)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> None:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)
    ]
    if title:
        print(f"\n{title}")
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def verdict(name: str, passed: bool, detail: str) -> str:
    line = f"{'PASS' if passed else 'FAIL'}  {name}: {detail}"
    print(f"\n{line}")
    return line


def environment() -> dict[str, Any]:
    """Where the numbers were taken: they only compare on the same machine."""
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "when": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
    }
    # The installed version, without importing torch into the benchmark's own process.
    for package in ("torch", "numpy", "memsight"):
        try:
            info[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            info[package] = None
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def write_result(name: str, result: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    payload = {"benchmark": name, "environment": environment(), **result}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"result written to {path.relative_to(REPO_ROOT)}")
    return path


def large_profile(samples: int = 1_000_000) -> Path:
    """The finished profile of `samples` RAM and GPU rows that load.py measures (made by
    synthetic_recording.py through the recorder's write path and compaction, verified),
    cached in the temporary folder under its cache key: a change of the profile format, the
    writing path or the generator makes a new one."""
    if __package__:  # imported as benchmarks._common
        from .synthetic_recording import Params, cached_profile
    else:  # imported as _common by a script in this folder
        from synthetic_recording import Params, cached_profile
    return Path(cached_profile(Params(samples=samples)))

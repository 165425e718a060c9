"""memsight beside memray, Scalene, Fil and mprof: the same workloads under each, side by side.

No target: this is a comparison, printed as measured. The peers are other tools, each with
its own purpose (benchmarks/README.md has a table of what each records that the others do
not), so the point is not a verdict but the cost and what each reports on the same work.

Workloads (benchmarks/workloads/):

* small: cpu_train.py --model tiny, ~1 ms training steps (a profiler's cost per step and per
  allocation shows most here);
* medium: cpu_train.py --model gpt, ~40 ms training steps;
* inference: infer_loader.py, a no_grad inference loop fed by a DataLoader with 2 worker
  processes;
* spike: spike.py --mib 512 --hold-ms 2, a 512 MiB tensor held 2 ms, freed, a pause; repeated.

Each workload runs under plain python, memsight (default; --no-hooks; --interval-ms 1) and
each peer installed in the peers' virtualenv (benchmarks/.peers-venv by default, or
--peers-venv; made with `pip install -c constraints.txt torch==2.13.0 -r
benchmarks/peers.txt`): `memray run`, `scalene run`, `fil-profile run`, `mprof run`, each at
its own defaults. A peer that is not installed there is skipped with a message. Plain python
and memsight run with the interpreter running this script, the peers with the peers'
virtualenv's interpreter (the same torch build, pinned by constraints.txt).

A round runs every workload once plain and once under each tool, the tools' order rotating
from round to round; each workload's step count is set once by a short plain run so its
timed loop takes about --loop-seconds. What is printed, per workload and tool (the median over
rounds):

* slowdown: the workload's own timed loop (perf_counter inside the script, so interpreter
  start, imports and the profiler's start and end are excluded) over the plain run's loop of
  the same round. The whole process's wall time is shown beside it;
* recorded peak: what the tool reports as the run's peak, from its own report: memsight
  `report --json` (peaks.ram_bytes: the main process's RSS), `memray stats --json`
  (metadata.peak_memory: heap bytes allocated and not yet freed), Scalene's JSON
  (max_footprint_mb), Fil's peak-memory.svg title ("Peak Tracked Memory Usage"), `mprof
  peak` (the highest RSS sample). RSS and heap peaks are different quantities: the
  "measures" column says which;
* true peak: the workload's own peak RSS (VmHWM, which the kernel keeps exactly) in the plain
  run of the same round; for the spike workload the 512 MiB spike is the known part of it,
  and a note says whether each tool's peak shows it (an RSS peak at least 95 % of 512 MiB
  above the plain run's baseline RSS; a heap peak at least 95 % of 512 MiB);
* output per minute: bytes of the profile / capture the tool wrote (every file of Fil's
  output folder), over the whole process's wall time;
* report time: running the tool's report command on its capture (memsight report --json,
  memray stats --json, scalene view --cli, mprof peak). Fil writes its report in the
  profiled process at exit: that time is in its run, and the column says n/a;
* profiler RSS: every process of the run is read every 100 ms (VmHWM); the peak RSS of the
  processes that are not the workload or its DataLoader workers (memsight's recorder, mprof's
  sampler) is the tool's own, summed. A tool running inside the workload's process (memray,
  Fil, Scalene, and memsight's agent) shows as "in-process": the workload's peak RSS under
  the tool less its plain run's peak. A process that lives less than 100 ms may be missed.

Where a tool cannot report a figure the table says n/a, and a note below it says why. A run
is killed, with its whole process tree, after --timeout seconds or once its processes' peak
RSS adds up to more than --max-rss-gib (8 by default: on this 2-core VM a Scalene run has
been seen to grow past 9 GiB on a busy machine); the table then says "failed" with the
reason.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from _common import (
    BENCH_DIR,
    WORKLOADS,
    _own_and_children_cpu_s,
    last_json_line,
    machine_busy_s,
    median,
    mib,
    peak_rss_of,
    print_table,
    write_result,
)

NAME = "peers"
MiB = 1024 * 1024
SPIKE_MIB = 512
POLL_S = 0.1
DEFAULT_PEERS_VENV = BENCH_DIR / ".peers-venv"
SETUP_HINT = (
    "python3 -m venv benchmarks/.peers-venv && benchmarks/.peers-venv/bin/pip install "
    "-c constraints.txt torch==2.13.0 -r benchmarks/peers.txt"
)


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    script: Path
    args: tuple[str, ...]
    count_flag: str  # the option that sets how much work a run does
    probe: int  # count of the calibration run
    minimum: int  # the fewest units a run does
    same_work: str | None  # the JSON key that two runs of the same work agree on


WORKLOAD_LIST = (
    Workload(
        "small",
        "small steps: cpu_train.py --model tiny (~1 ms steps)",
        WORKLOADS / "cpu_train.py",
        ("--model", "tiny", "--threads", "1"),
        "--steps",
        200,
        20,
        "loss",
    ),
    Workload(
        "medium",
        "medium steps: cpu_train.py --model gpt (~40 ms steps)",
        WORKLOADS / "cpu_train.py",
        ("--model", "gpt", "--threads", "1"),
        "--steps",
        10,
        3,
        "loss",
    ),
    Workload(
        "inference",
        "inference: infer_loader.py, no_grad, DataLoader with 2 workers",
        WORKLOADS / "infer_loader.py",
        ("--workers", "2", "--threads", "1"),
        "--batches",
        20,
        5,
        "checksum",
    ),
    Workload(
        "spike",
        f"spike: spike.py, {SPIKE_MIB} MiB held 2 ms, then a 30-90 ms pause",
        WORKLOADS / "spike.py",
        ("--mib", str(SPIKE_MIB), "--hold-ms", "2", "--pause-ms", "60"),
        "--count",
        3,
        2,
        None,
    ),
)
WORKLOADS_BY_KEY = {w.key: w for w in WORKLOAD_LIST}


@dataclass
class Run:
    """One run of a workload under one tool, and what was read from it."""

    tool: str
    workload: str
    round: int
    loop_s: float | None = None
    process_s: float | None = None
    result: dict[str, Any] = field(default_factory=dict)  # the workload's JSON line
    recorded_peak: int | None = None
    peak_note: str = ""
    output_bytes: int | None = None
    report_s: float | None = None
    report_note: str = ""
    own_rss: int | None = None  # peak RSS of the tool's own processes, summed
    own_procs: list[str] = field(default_factory=list)
    background_cores: float | None = None
    error: str = ""


@dataclass
class Tool:
    key: str
    label: str
    measures: str
    # (workload script and args, folder for the capture) -> argv, capture path
    command: Callable[[list[str], Path], tuple[list[str], Path]]
    # (run, capture path, folder) -> fills the run's recorded peak and report time
    report: Callable[[Run, Path, Path], None]
    python: str = sys.executable
    in_peers_venv: bool = False


# --- running a process and watching its tree ----------------------------------------------


@dataclass
class Watched:
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    background_cores: float | None
    # pid -> (parent pid, peak RSS seen, name)
    procs: dict[int, tuple[int, int, str]]


def _poll_tree(root: psutil.Process, procs: dict[int, tuple[int, int, str]]) -> None:
    try:
        members = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for proc in members:
        hwm = peak_rss_of(proc.pid)
        if hwm is None:
            continue
        old = procs.get(proc.pid)
        if old is None:
            try:
                name = " ".join(proc.cmdline()[:3]) or proc.name()
                ppid = proc.ppid()
            except psutil.Error:
                continue
            procs[proc.pid] = (ppid, hwm, name)
        else:
            procs[proc.pid] = (old[0], max(old[1], hwm), old[2])


def run_watched(
    argv: Sequence[str],
    cwd: Path,
    timeout: float,
    max_rss: float,
    env: dict[str, str] | None = None,
) -> Watched:
    """Run argv to its end, reading its process tree's peak RSS every POLL_S seconds.

    The whole tree (its own session) is killed after `timeout` seconds, or once the peak RSS
    of its processes adds up to more than `max_rss` bytes: a profiler's memory can run away,
    and the machine may be shared.
    """
    busy_before, ours_before = machine_busy_s(), _own_and_children_cpu_s()
    start = time.perf_counter()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    root = psutil.Process(proc.pid)
    procs: dict[int, tuple[int, int, str]] = {}
    while True:
        _poll_tree(root, procs)
        try:
            stdout, stderr = proc.communicate(timeout=POLL_S)
            break
        except subprocess.TimeoutExpired:
            reason = ""
            if time.perf_counter() - start > timeout:
                reason = f"killed after {timeout:g} s (--timeout)"
            elif sum(hwm for _, hwm, _ in procs.values()) > max_rss:
                reason = (
                    f"killed: its processes passed {max_rss / 2**30:g} GiB of RSS (--max-rss-gib)"
                )
            if reason:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                stdout, stderr = proc.communicate()
                stderr += f"\n{reason}"
                break
    wall = time.perf_counter() - start
    busy_after = machine_busy_s()
    background = None
    if busy_before is not None and busy_after is not None and wall > 0:
        other = busy_after - busy_before - (_own_and_children_cpu_s() - ours_before)
        background = max(0.0, other) / wall
    return Watched(proc.returncode, stdout, stderr, wall, background, procs)


def own_processes(procs: dict[int, tuple[int, int, str]], workload_pid: int) -> list[int]:
    """The processes of a run that are neither the workload nor its descendants."""

    def in_workload(pid: int) -> bool:
        seen = set()
        while pid in procs and pid not in seen:
            if pid == workload_pid:
                return True
            seen.add(pid)
            pid = procs[pid][0]
        return pid == workload_pid

    return [pid for pid in procs if not in_workload(pid)]


def timed(argv: Sequence[str], cwd: Path, timeout: float) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(
        list(argv),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:4])} ... failed ({proc.returncode}): {proc.stderr[-500:].strip()}"
        )
    return elapsed, proc.stdout


def folder_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# --- the tools ------------------------------------------------------------------------------


def memsight_tool(key: str, label: str, options: list[str], timeout: float) -> Tool:
    def command(target: list[str], folder: Path) -> tuple[list[str], Path]:
        out = folder / "run.memsight"
        cmd = [
            sys.executable,
            "-m",
            "memsight.profiler.cli",
            "run",
            "-q",
            "--out",
            str(out),
            *options,
        ]
        return [*cmd, *target], out

    def report(run: Run, capture: Path, folder: Path) -> None:
        argv = [sys.executable, "-m", "memsight.profiler.cli", "report", "--json", str(capture)]
        run.report_s, stdout = timed(argv, folder, timeout)
        run.recorded_peak = json.loads(stdout)["peaks"]["ram_bytes"]
        if run.recorded_peak is None:
            run.peak_note = "memsight report: no RAM samples"

    return Tool(key, label, "RSS, main process", command, report)


def make_tools(peers_python: str, timeout: float) -> list[Tool]:
    py = peers_python

    def plain_command(target: list[str], folder: Path) -> tuple[list[str], Path]:
        return [sys.executable, *target], folder

    def plain_report(run: Run, capture: Path, folder: Path) -> None:
        run.peak_note = "no profiler"

    def memray_command(target: list[str], folder: Path) -> tuple[list[str], Path]:
        out = folder / "run.bin"
        return [py, "-m", "memray", "run", "-q", "-f", "-o", str(out), *target], out

    def memray_report(run: Run, capture: Path, folder: Path) -> None:
        stats = folder / "stats.json"
        argv = [py, "-m", "memray", "stats", "--json", "-f", "-o", str(stats), str(capture)]
        run.report_s, _ = timed(argv, folder, timeout)
        run.recorded_peak = int(json.loads(stats.read_text())["metadata"]["peak_memory"])

    def scalene_command(target: list[str], folder: Path) -> tuple[list[str], Path]:
        out = folder / "scalene.json"
        script, *args = target
        return [py, "-m", "scalene", "run", "-o", str(out), script, "---", *args], out

    def scalene_report(run: Run, capture: Path, folder: Path) -> None:
        profile = json.loads(capture.read_text())
        if "max_footprint_mb" in profile:
            # Scalene's "MB" are 2**20 bytes (it divides byte counts by 1024 * 1024).
            run.recorded_peak = round(float(profile["max_footprint_mb"]) * MiB)
        else:
            run.peak_note = "Scalene's JSON has no max_footprint_mb"
        argv = [py, "-m", "scalene", "view", "--cli", "-r", str(capture)]
        run.report_s, _ = timed(argv, folder, timeout)

    def fil_command(target: list[str], folder: Path) -> tuple[list[str], Path]:
        out = folder / "fil"
        return [py, "-m", "filprofiler", "-o", str(out), "--no-browser", "run", *target], out

    def fil_report(run: Run, capture: Path, folder: Path) -> None:
        run.report_note = "written by the profiled process at exit (in its run time)"
        svgs = sorted(capture.rglob("peak-memory.svg"))
        if not svgs:
            run.peak_note = "Fil wrote no peak-memory.svg"
            return
        match = re.search(
            r"Peak Tracked Memory Usage \(([\d.]+) (KiB|MiB|GiB)\)", svgs[0].read_text()
        )
        if match is None:
            run.peak_note = "no peak in Fil's peak-memory.svg title"
            return
        scale = {"KiB": 1024, "MiB": MiB, "GiB": 1024 * MiB}[match.group(2)]
        run.recorded_peak = round(float(match.group(1)) * scale)

    def mprof_command(target: list[str], folder: Path) -> tuple[list[str], Path]:
        out = folder / "mprof.dat"
        return [py, "-m", "mprof", "run", "-o", str(out), *target], out

    def mprof_report(run: Run, capture: Path, folder: Path) -> None:
        run.report_s, stdout = timed([py, "-m", "mprof", "peak", str(capture)], folder, timeout)
        match = re.search(r"([\d.]+) MiB", stdout)
        if match is None:
            run.peak_note = f"no peak in `mprof peak` output: {stdout.strip()[:80]}"
            return
        run.recorded_peak = round(float(match.group(1)) * MiB)

    return [
        Tool("python", "python", "", plain_command, plain_report),
        memsight_tool("memsight", "memsight", [], timeout),
        memsight_tool("memsight-no-hooks", "memsight --no-hooks", ["--no-hooks"], timeout),
        memsight_tool("memsight-1ms", "memsight 1 ms", ["--interval-ms", "1"], timeout),
        Tool("memray", "memray", "heap, main process", memray_command, memray_report, py, True),
        Tool(
            "scalene", "Scalene", "footprint (sampled)", scalene_command, scalene_report, py, True
        ),
        Tool("fil", "Fil", "heap, main process", fil_command, fil_report, py, True),
        Tool("mprof", "mprof", "RSS, 0.1 s samples", mprof_command, mprof_report, py, True),
    ]


PEER_MODULES = {"memray": "memray", "scalene": "scalene", "fil": "filprofiler", "mprof": "mprof"}
TOOL_KEYS = (
    "memsight",
    "memsight-no-hooks",
    "memsight-1ms",
    "memray",
    "scalene",
    "fil",
    "mprof",
)


def peers_available(python: Path) -> tuple[dict[str, bool], str | None]:
    """Which peers import in the peers' interpreter, and its torch version."""
    if not python.exists():
        return {k: False for k in PEER_MODULES}, None
    code = (
        "import importlib.util, importlib.metadata, json\n"
        f"mods = {PEER_MODULES!r}\n"
        "found = {k: importlib.util.find_spec(m) is not None for k, m in mods.items()}\n"
        "try:\n    torch = importlib.metadata.version('torch')\n"
        "except importlib.metadata.PackageNotFoundError:\n    torch = None\n"
        "print(json.dumps({'found': found, 'torch': torch}))\n"
    )
    out = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    if out.returncode != 0:
        return {k: False for k in PEER_MODULES}, None
    info = json.loads(out.stdout)
    return {k: bool(v) for k, v in info["found"].items()}, info["torch"]


# --- a run ----------------------------------------------------------------------------------


def run_one(
    tool: Tool,
    workload: Workload,
    count: int,
    round_: int,
    folder: Path,
    timeout: float,
    max_rss: float,
) -> Run:
    run = Run(tool.key, workload.key, round_)
    folder.mkdir(parents=True, exist_ok=True)
    target = [str(workload.script), *workload.args, workload.count_flag, str(count)]
    argv, capture = tool.command(target, folder)
    # The peers' tools find their own interpreter's packages; VIRTUAL_ENV of the venv running
    # this script must not point them elsewhere.
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    watched = run_watched(argv, folder, timeout, max_rss, env)
    run.process_s = watched.wall_s
    run.background_cores = watched.background_cores
    if watched.returncode != 0:
        tail = (watched.stderr.strip().splitlines() or ["(no output)"])[-1].strip()
        run.error = f"exit status {watched.returncode}: {tail[:200]}"
        return run
    try:
        run.result = last_json_line(watched.stdout)
    except ValueError:
        run.error = "the workload printed no JSON result"
        return run
    run.loop_s = float(run.result["loop_s"])
    pid = int(run.result["pid"])
    own = own_processes(watched.procs, pid)
    run.own_rss = sum(watched.procs[p][1] for p in own) if own else None
    run.own_procs = [watched.procs[p][2] for p in own]
    if tool.key != "python":
        run.output_bytes = folder_bytes(capture) if capture.exists() else None
    try:
        tool.report(run, capture, folder)
    except (RuntimeError, OSError, ValueError, KeyError, subprocess.TimeoutExpired) as exc:
        run.peak_note = run.peak_note or f"report failed: {exc}"
    return run


def calibrate(
    workload: Workload, loop_seconds: float, folder: Path, timeout: float, max_rss: float
) -> int:
    """Units of work that take about `loop_seconds` in a plain run on this machine."""
    target = [str(workload.script), *workload.args, workload.count_flag, str(workload.probe)]
    watched = run_watched([sys.executable, *target], folder, timeout, max_rss)
    if watched.returncode != 0:
        raise RuntimeError(f"{workload.script.name} failed:\n{watched.stderr[-2000:]}")
    per_unit = float(last_json_line(watched.stdout)["loop_s"]) / workload.probe
    return max(workload.minimum, round(loop_seconds / per_unit))


# --- the summary ----------------------------------------------------------------------------


def fmt_mib(n: float | None) -> str:
    return "n/a" if n is None else f"{mib(n):,.0f}"


def summarise(
    workload: Workload, tools: list[Tool], runs: list[Run]
) -> tuple[list[list[str]], list[str], list[dict[str, Any]]]:
    """The table rows, the notes under it and the numbers for the JSON result."""
    plain = {r.round: r for r in runs if r.tool == "python" and r.workload == workload.key}
    rows: list[list[str]] = []
    notes: list[str] = []
    summary: list[dict[str, Any]] = []
    baseline = [int(r.result["baseline_rss"]) for r in plain.values() if "baseline_rss" in r.result]
    for tool in tools:
        mine = [r for r in runs if r.tool == tool.key and r.workload == workload.key]
        ok = [r for r in mine if not r.error]
        for r in mine:
            if r.error:
                notes.append(f"{tool.label}, round {r.round + 1}: failed, {r.error}")
        if not ok:
            rows.append([tool.label, "failed", *["n/a"] * 9])
            continue
        ratios, trues, extras, work_differs = [], [], [], False
        for r in ok:
            base = plain.get(r.round)
            if base is None or base.error or r.loop_s is None or base.loop_s is None:
                continue
            ratios.append(r.loop_s / base.loop_s)
            trues.append(int(base.result["vm_hwm"]))
            extras.append(int(r.result["vm_hwm"]) - int(base.result["vm_hwm"]))
            key = workload.same_work
            if key is not None and r.result.get(key) != base.result.get(key):
                work_differs = True
        if work_differs:
            notes.append(f"{tool.label}: {workload.same_work} differs from the plain run's")
        true_peak = median(trues) if trues else None
        peaks = [r.recorded_peak for r in ok if r.recorded_peak is not None]
        recorded = median(peaks) if peaks else None
        outputs = [
            r.output_bytes / (r.process_s / 60.0)
            for r in ok
            if r.output_bytes is not None and r.process_s
        ]
        reports = [r.report_s for r in ok if r.report_s is not None]
        owns = [r.own_rss for r in ok if r.own_rss is not None]
        peak_notes = {r.peak_note for r in ok if r.peak_note and r.recorded_peak is None}
        report_notes = {r.report_note for r in ok if r.report_note and r.report_s is None}
        if tool.key != "python":
            for note in sorted(peak_notes):
                notes.append(f"{tool.label}: recorded peak n/a: {note}")
            for note in sorted(report_notes):
                notes.append(f"{tool.label}: report time n/a: {note}")
        own_names = sorted({n for r in ok for n in r.own_procs})
        spike_seen = ""
        if workload.key == "spike" and recorded is not None:
            if tool.measures.startswith("RSS") and baseline:
                height = recorded - median(baseline)
            else:
                height = recorded
            spike_seen = "yes" if height >= 0.95 * SPIKE_MIB * MiB else "no"
        slowdown = median(ratios) if ratios else None
        extra = median(extras) if extras else None
        loop_s = median([r.loop_s for r in ok if r.loop_s is not None])
        process_s = median([r.process_s for r in ok if r.process_s is not None])
        measures = tool.measures or "RSS (VmHWM)"
        row = [
            tool.label,
            "1.00" if tool.key == "python" else ("n/a" if slowdown is None else f"{slowdown:.2f}x"),
            f"{loop_s:.2f}",
            f"{process_s:.1f}",
            fmt_mib(true_peak if tool.key == "python" else recorded),
            "n/a"
            if recorded is None or not true_peak or tool.key == "python"
            else f"{recorded / true_peak:.2f}",
            measures,
            ""
            if tool.key == "python"
            else (f"{median(outputs) / 1024:,.0f}" if outputs else "n/a"),
            "" if tool.key == "python" else (f"{median(reports):.2f}" if reports else "n/a"),
            "" if tool.key == "python" else (fmt_mib(median(owns)) if owns else "in-process"),
            "" if tool.key == "python" or extra is None else f"{mib(extra):+,.0f}",
        ]
        if workload.key == "spike":
            row.append(spike_seen)
        rows.append(row)
        summary.append(
            {
                "tool": tool.key,
                "runs": len(ok),
                "slowdown": slowdown,
                "loop_s": loop_s,
                "process_s": process_s,
                "recorded_peak_bytes": recorded,
                "true_peak_bytes": true_peak,
                "measures": measures,
                "output_bytes_per_min": median(outputs) if outputs else None,
                "report_s": median(reports) if reports else None,
                "own_rss_bytes": median(owns) if owns else None,
                "own_processes": own_names,
                "in_process_extra_bytes": extra,
                "spike_seen": spike_seen or None,
            }
        )
    return rows, notes, summary


HEADERS = [
    "tool",
    "slowdown",
    "loop s",
    "process s",
    "peak MiB",
    "rec/true",
    "measures",
    "KiB/min",
    "report s",
    "own RSS MiB",
    "in-proc +MiB",
]


# --- main -----------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=2, help="runs per workload and tool (default 2)")
    p.add_argument(
        "--loop-seconds",
        type=float,
        default=0.5,
        help="aim for a plain timed loop of about this long per run (default 0.5; a slow "
        "profiler's runs take many times that: Scalene's inference run ~2 minutes)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run of every tool: 1 round, --loop-seconds 0.2, the small workload "
        "unless --workloads says otherwise (~1.5 minutes)",
    )
    p.add_argument(
        "--only",
        default=",".join(TOOL_KEYS),
        metavar="TOOL,...",
        help=f"tools to run beside plain python (default all: {','.join(TOOL_KEYS)})",
    )
    p.add_argument(
        "--workloads",
        default=None,
        metavar="NAME,...",
        help=f"workloads to run (default all: {','.join(WORKLOADS_BY_KEY)})",
    )
    p.add_argument(
        "--peers-venv",
        type=Path,
        default=DEFAULT_PEERS_VENV,
        help="virtualenv the peers are installed in (default benchmarks/.peers-venv)",
    )
    p.add_argument(
        "--timeout", type=float, default=600.0, help="seconds before a run is killed (default 600)"
    )
    p.add_argument(
        "--max-rss-gib",
        type=float,
        default=8.0,
        help="kill a run once the peak RSS of its processes adds up to more than this "
        "(default 8; Scalene's in-process memory can grow by several GiB)",
    )
    opts = p.parse_args()
    if opts.quick:
        opts.rounds = 1
        opts.loop_seconds = 0.2
        opts.workloads = opts.workloads or "small"
    opts.workloads = opts.workloads or ",".join(WORKLOADS_BY_KEY)
    for name, allowed in (("--only", TOOL_KEYS), ("--workloads", tuple(WORKLOADS_BY_KEY))):
        value = opts.only if name == "--only" else opts.workloads
        unknown = [k for k in value.split(",") if k and k not in allowed]
        if unknown:
            p.error(f"{name}: unknown {', '.join(unknown)} (choose from {', '.join(allowed)})")
    return opts


def main() -> int:
    opts = parse_args()
    started = time.perf_counter()
    peers_python = opts.peers_venv / "bin" / "python"
    found, peers_torch = peers_available(peers_python)
    wanted = [k for k in opts.only.split(",") if k]
    tools = [t for t in make_tools(str(peers_python), opts.timeout) if t.key == "python"]
    for tool in make_tools(str(peers_python), opts.timeout):
        if tool.key not in wanted:
            continue
        if tool.in_peers_venv and not found.get(tool.key, False):
            where = (
                f"in {opts.peers_venv}"
                if peers_python.exists()
                else f"({opts.peers_venv} does not exist)"
            )
            print(f"{tool.label}: not installed {where}; skipped. Set up with: {SETUP_HINT}")
            continue
        tools.append(tool)
    workloads = [WORKLOADS_BY_KEY[k] for k in opts.workloads.split(",") if k]
    from importlib.metadata import version

    ours = version("torch")
    if any(t.in_peers_venv for t in tools) and peers_torch != ours:
        print(f"warning: the peers' venv has torch {peers_torch}, this interpreter {ours}")

    max_rss = opts.max_rss_gib * 2**30
    runs: list[Run] = []
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="memsight-peers-") as tmp:
        root = Path(tmp)
        for w in workloads:
            counts[w.key] = calibrate(w, opts.loop_seconds, root, opts.timeout, max_rss)
            print(f"{w.key}: {w.count_flag} {counts[w.key]}", flush=True)
        for round_ in range(opts.rounds):
            for w in workloads:
                # Plain first, then the tools in an order that rotates from round to round.
                peers = tools[1:]
                shift = round_ % len(peers) if peers else 0
                for tool in [tools[0], *peers[shift:], *peers[:shift]]:
                    folder = root / f"{round_}-{w.key}-{tool.key}"
                    run = run_one(tool, w, counts[w.key], round_, folder, opts.timeout, max_rss)
                    runs.append(run)
                    status = (
                        f"failed: {run.error}"
                        if run.error
                        else f"loop {run.loop_s:.2f} s, process {run.process_s:.1f} s"
                    )
                    print(
                        f"  round {round_ + 1}/{opts.rounds} {w.key:9} {tool.label:19} {status}",
                        flush=True,
                    )

    summaries: dict[str, Any] = {}
    for w in workloads:
        rows, notes, summary = summarise(w, tools, runs)
        headers = HEADERS + (["512 MiB seen"] if w.key == "spike" else [])
        print_table(headers, rows, title=f"{w.title}; {w.count_flag} {counts[w.key]}")
        for note in notes:
            print(f"  note: {note}")
        summaries[w.key] = summary
    busy = [r.background_cores for r in runs if r.background_cores is not None]
    print(
        "\nslowdown: the workload's timed loop over the plain run's of the same round (median "
        f"of {opts.rounds}); peak MiB: the tool's reported peak (python: the workload's "
        "VmHWM, the true peak); KiB/min: capture bytes per minute of the whole process; own "
        "RSS: the tool's processes other than the workload's; in-proc: the workload's peak RSS "
        "less the plain run's."
    )
    if busy:
        print(
            f"background load (other processes): median {median(busy):.2f}, "
            f"max {max(busy):.2f} cores" + ("  <- timings disturbed" if max(busy) > 0.2 else "")
        )
    print(f"total time {time.perf_counter() - started:.0f} s")
    write_result(
        NAME,
        {
            "settings": {
                "rounds": opts.rounds,
                "loop_seconds": opts.loop_seconds,
                "quick": opts.quick,
                "tools": [t.key for t in tools],
                "workloads": {w.key: [*w.args, w.count_flag, counts[w.key]] for w in workloads},
                "peers_venv": str(opts.peers_venv),
                "peers_found": found,
                "peers_torch": peers_torch,
            },
            "summary": summaries,
            "runs": [vars(r) for r in runs],
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

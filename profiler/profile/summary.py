"""Key numbers of a profile: peaks with their times, the exit, children, counts, and how well
the recorder kept to the asked sampling interval.

`memsight report` prints these; `report --json` follows the schema in docs/architecture.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memsight.profiler.profile.attachments import cuda_snapshots, describe_snapshot
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.processes import ProcessInfo, process_exception
from memsight.profiler.profile.series import process_tree_bytes
from memsight.profiler.terminal_text import terminal_safe
from memsight.profiler.units import format_bytes, format_duration


@dataclass(frozen=True)
class Peak:
    bytes: int
    t: float  # seconds since the start of the run


# The recorder fell behind when its samples came, on average, more than 10 % further apart
# than the interval asked for.
BEHIND_FACTOR = 1.1
# Samples spanning fewer asked intervals than this are too few to judge: one late tick in a
# run of a handful of samples is already more than 10 % of it.
JUDGED_FROM_INTERVALS = 10


@dataclass(frozen=True)
class SamplingPace:
    """How the recorder kept to the asked interval, from the times of the `ram` table's samples
    (the profile's own process: the target, or one process of a job) while it ran."""

    asked_ms: float | None  # the interval asked for (`--interval-ms`); None if the file lacks it
    samples: int  # the samples counted: the `ram` rows up to the process's exit
    samples_per_second: float | None  # (samples - 1) / their span; None below 2 samples
    longest_gap_ms: float | None  # the longest time between two consecutive samples
    # More than 10 % slower than asked on average; None when it cannot be judged (no asked
    # interval, or samples spanning fewer than JUDGED_FROM_INTERVALS asked intervals).
    behind: bool | None

    @property
    def mean_interval_ms(self) -> float | None:
        """The time between samples on average."""
        if not self.samples_per_second:
            return None
        return 1000.0 / self.samples_per_second

    @property
    def asked_per_second(self) -> float | None:
        return 1000.0 / self.asked_ms if self.asked_ms else None


def sampling_pace(profile: Profile, last_s: float | None = None) -> SamplingPace:
    """The achieved sampling rate, the longest gap and whether the recorder fell behind.

    Counted over the samples taken while the process ran: a sample after its recorded exit is
    left out. `last_s`: only the samples of the last `last_s` seconds (stretched to cover
    JUDGED_FROM_INTERVALS asked intervals), for a running figure; None: the whole run.
    """
    asked = profile.info.interval_ms
    asked_ms = float(asked) if math.isfinite(asked) and asked > 0 else None
    ram = profile.ram
    t = ram.t if ram is not None else np.empty(0)
    end = profile.info.end_t
    if end is not None:
        t = _until(t, end)
    if last_s is not None and len(t):
        window = max(last_s, JUDGED_FROM_INTERVALS * (asked_ms or 0.0) / 1000.0)
        t = t[int(np.searchsorted(t, t[-1] - window, side="left")) :]
    n = len(t)
    if n < 2:
        return SamplingPace(asked_ms, n, None, None, None)
    span = float(t[-1] - t[0])
    longest = _longest_gap(t)
    if not (math.isfinite(span) and span > 0 and math.isfinite(longest)):
        return SamplingPace(asked_ms, n, None, None, None)
    behind = None
    if asked_ms is not None and span * 1000.0 >= JUDGED_FROM_INTERVALS * asked_ms:
        behind = span * 1000.0 / (n - 1) > BEHIND_FACTOR * asked_ms
    return SamplingPace(asked_ms, n, (n - 1) / span, longest * 1000.0, behind)


# Times compared at a time by _longest_gap: a day's 8.6 million in one np.diff would write a
# 69 MB temporary, whose first touch of every page cost the status bar 0.3 s.
GAP_BLOCK = 1 << 16


def _until(t: np.ndarray, end: float) -> np.ndarray:
    """The times at or before `end`: a view where they come first (times in order, the usual
    case), else a copy of those kept."""
    keep = t <= end
    if not len(keep):
        return t
    first_after = int(np.argmin(keep))
    if keep[first_after]:  # every time is kept
        return t
    if not keep[first_after:].any():
        return t[:first_after]
    return t[keep]


def _longest_gap(t: np.ndarray) -> float:
    """max(np.diff(t)) of two or more times, a block at a time (GAP_BLOCK)."""
    longest = -math.inf
    gaps = np.empty(min(GAP_BLOCK, len(t) - 1), dtype=np.float64)
    for start in range(0, len(t) - 1, GAP_BLOCK):
        stop = min(start + GAP_BLOCK, len(t) - 1)
        block = gaps[: stop - start]
        np.subtract(t[start + 1 : stop + 1], t[start:stop], out=block)
        block_longest = float(block.max())
        if math.isnan(block_longest):
            return block_longest  # a time that is not a number: no longest gap to tell
        longest = max(longest, block_longest)
    return longest


def format_rate(per_second: float) -> str:
    """A sampling rate, as the reports and the status bar show it: "885", "2.5"."""
    return f"{per_second:.0f}" if per_second >= 10 else f"{per_second:.2g}"


def _ms(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


def sampling_behind_text(pace: SamplingPace) -> str | None:
    """The one sentence every report gives when the recorder fell behind the asked interval;
    None when it kept up or cannot be judged."""
    rate, mean, longest = pace.samples_per_second, pace.mean_interval_ms, pace.longest_gap_ms
    if not pace.behind or pace.asked_ms is None or rate is None or mean is None:
        return None
    return (
        f"asked every {pace.asked_ms:g} ms, got {format_rate(rate)} samples/s "
        f"(every {_ms(mean)} ms on average; longest gap {_ms(longest or 0.0)} ms): the machine "
        "was too busy to keep up; peaks still include what came between samples"
    )


@dataclass(frozen=True)
class ChildSummary:
    pid: int
    name: str
    cmdline: list[str]
    first_seen: float
    exited: float | None
    peak_uss: int | None
    peak_pss: int | None


@dataclass
class RunSummary:
    duration_s: float
    samples: int
    iterations: int
    exit_code: int | None
    signal: int | None
    ram: Peak | None
    ram_tree: Peak | None
    gpu_allocated: Peak | None
    gpu_reserved: Peak | None
    children: list[ChildSummary] = field(default_factory=list)


def _peak(t: np.ndarray, values: np.ndarray) -> Peak | None:
    if len(values) == 0:
        return None
    i = int(np.argmax(values))
    return Peak(int(values[i]), float(t[i]))


def summarize(profile: Profile) -> RunSummary:
    ram = profile.ram
    ram_peak = tree_peak = None
    if ram is not None and len(ram):
        ram_peak = _peak(ram.t, ram["rss_peak"])
        tree_peak = _peak(ram.t, process_tree_bytes(ram))
    gpu = profile.gpu
    alloc_peak = reserved_peak = None
    if gpu is not None:
        alloc_peak = _peak(gpu.t, gpu["allocated_peak"])
        reserved_peak = _peak(gpu.t, gpu["reserved_peak"])
    return RunSummary(
        duration_s=profile.duration,
        samples=profile.sample_count,
        iterations=profile.iterations,
        exit_code=profile.info.exit_code,
        signal=profile.info.signal,
        ram=ram_peak,
        ram_tree=tree_peak,
        gpu_allocated=alloc_peak,
        gpu_reserved=reserved_peak,
        children=_children(profile),
    )


def damage_read_text(profile: Profile) -> str | None:
    """What of a damaged file was read: "read 907 of 1,000 bytes: 12 samples over 0.11 s"
    (None for a whole file). The CLI's report and the app's Findings panel both say it."""
    damage = profile.damaged
    if damage is None:
        return None
    return (
        f"read {damage.read_bytes:,} of {damage.file_bytes:,} bytes: "
        f"{profile.sample_count:,} samples over {format_duration(profile.duration)}"
    )


def judged_nothing(profile: Profile) -> bool:
    """A damaged file of which no memory sample could be read: there is no verdict to give,
    and "no problems found" would read as one."""
    return profile.damaged is not None and profile.sample_count == 0


def _children(profile: Profile) -> list[ChildSummary]:
    table = profile.table("children")
    out = []
    for pid, child in sorted(profile.children.items()):
        peak_uss = peak_pss = None
        if table is not None and len(table):
            mask = table["pid"] == pid
            if mask.any():
                peak_uss = int(table["uss"][mask].max())
                peak_pss = int(table["pss"][mask].max())
        out.append(
            ChildSummary(
                pid, child.name, child.cmdline, child.first_seen, child.exited, peak_uss, peak_pss
            )
        )
    return out


@dataclass(frozen=True)
class ProcessSummary:
    """One process of the run (the target, a rank, a spawned worker) for the per-rank table."""

    process: ProcessInfo
    iterations: int
    ram: Peak | None  # its own RSS peak
    gpu_allocated: Peak | None
    ended_by: str
    exception: dict[str, Any] | None = None  # processes.process_exception


def summarize_processes(profile: Profile) -> list[ProcessSummary]:
    """The target, then the job's ranks by rank, then its other processes in the order they
    started, by the same peaks as summarize(). By rank: the recorder numbers processes as they
    connect, so rank 1 is often process 1 and rank 0 process 2."""
    others = sorted(
        profile.subprocesses.values(),
        key=lambda v: (v.process.rank is None, v.process.rank or 0, v.process.proc),
    )
    out = []
    for view in (profile, *others):
        s = summarize(view)
        ended = view.info.ended_by if view is profile else view.process.ended_by
        exception = process_exception(view)
        out.append(
            ProcessSummary(view.process, s.iterations, s.ram, s.gpu_allocated, ended, exception)
        )
    return out


def process_name(process: ProcessInfo) -> str:
    """A process as every per-process view names it: "rank 1", "pid 4242 (target)"."""
    return f"{process.label} (target)" if process.proc == 0 else process.label


# The per-process table's columns, in the text report and the HTML report alike (process_row).
PROCESS_COLUMNS = (
    ("process", "process"), ("role", "role"), ("peak_ram", "peak RAM"),
    ("peak_gpu", "peak GPU"), ("iterations", "iterations"), ("ended", "ended"),
)  # fmt: skip


def process_row(p: ProcessSummary) -> dict[str, str]:
    """One process as the per-process tables show it, by PROCESS_COLUMNS' keys."""
    return {
        "process": process_name(p.process),
        "role": p.process.role,
        "peak_ram": format_bytes(p.ram.bytes) if p.ram is not None else "—",
        "peak_gpu": format_bytes(p.gpu_allocated.bytes) if p.gpu_allocated is not None else "—",
        "iterations": f"{p.iterations:,}",
        "ended": ended_text(p),
    }


def ended_text(p: ProcessSummary) -> str:
    """How a process ended, with the exception that ended it: "exit code 1 (RuntimeError)"."""
    if p.exception is None:
        return p.ended_by
    return f"{p.ended_by} ({str(p.exception['type']).rsplit('.', 1)[-1]})"


def process_to_json(p: ProcessSummary) -> dict[str, Any]:
    """One entry of `report --json`'s "processes"."""
    info = p.process
    return {
        "proc": info.proc,
        "pid": info.pid,
        "parent": info.parent,
        "rank": info.rank,
        "role": info.role,
        "label": info.label,
        "iterations": p.iterations,
        "peak_ram_bytes": p.ram.bytes if p.ram is not None else None,
        "peak_gpu_allocated_bytes": p.gpu_allocated.bytes if p.gpu_allocated else None,
        "exit_code": info.exit_code,
        "signal": info.signal,
        "command": list(info.cmdline),
        "started_s": round(info.started, 6),
        "ended_s": round(info.ended, 6) if info.ended is not None else None,
        "ended_by": p.ended_by,
        "exception": p.exception,
    }


def to_json(profile: Profile, findings: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The `memsight report --json` object (schema in docs/architecture.md; keys may be added)."""
    s = summarize(profile)
    info = profile.info
    pace = sampling_pace(profile)

    def value(p: Peak | None) -> int | None:
        return p.bytes if p is not None else None

    def at(p: Peak | None) -> float | None:
        return round(p.t, 4) if p is not None else None

    return {
        "run": {
            "script": f"-m {info.module}" if info.module is not None else info.script,
            "argv": info.argv,
            "exit_code": s.exit_code,
            "signal": s.signal,
            "duration_s": round(s.duration_s, 4),
            "samples": s.samples,
            "iterations": s.iterations,
            "module": info.module,
            "cwd": info.cwd,
            "python": info.python,
            "python_version": info.python_version or None,
            "torch_version": info.torch_version,
            "start_time": info.start_time,
            "interval_ms": info.interval_ms,
            "complete": profile.complete,
            "samples_per_second": _rounded(pace.samples_per_second, 2),
            "longest_gap_ms": _rounded(pace.longest_gap_ms, 3),
            "sampling_behind": pace.behind,
            "attached": info.attached,
            "attached_at": info.attached_at,
        },
        "peaks": {
            "ram_bytes": value(s.ram),
            "ram_tree_bytes": value(s.ram_tree),
            "gpu_allocated_bytes": value(s.gpu_allocated),
            "gpu_reserved_bytes": value(s.gpu_reserved),
            "ram_t": at(s.ram),
            "ram_tree_t": at(s.ram_tree),
            "gpu_allocated_t": at(s.gpu_allocated),
            "gpu_reserved_t": at(s.gpu_reserved),
        },
        "children": [
            {
                "pid": c.pid,
                "name": c.name,
                "cmdline": c.cmdline,
                "first_seen_s": round(c.first_seen, 4),
                "exited_s": round(c.exited, 4) if c.exited is not None else None,
                "peak_uss_bytes": c.peak_uss,
                "peak_pss_bytes": c.peak_pss,
            }
            for c in s.children
        ],
        "devices": [
            {"index": d.index, "name": d.name, "total_bytes": d.total_bytes} for d in info.devices
        ],
        "warnings": list(profile.warnings),
        "cuda_snapshots": [
            {
                "snapshot": c.number,
                "reason": c.reason,
                "t": round(c.t, 4),
                "bytes": c.bytes,
                "device": c.device,
                "trace_entries": c.trace_entries,
            }
            for c in cuda_snapshots(profile)
        ],
        "processes": [process_to_json(p) for p in summarize_processes(profile)],
        "findings": findings or [],
    }


def _rounded(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None else None


def format_text(profile: Profile, name: str) -> str:
    """The short human summary printed by `memsight report`.

    Text from the target (argv, paths, process names) is kept to one line each, its control
    characters escaped (profiler/terminal_text.py), so that it cannot break the layout."""
    s = summarize(profile)
    info = profile.info
    one = terminal_safe
    versions = [f"Python {info.python_version}" if info.python_version else ""]
    if info.torch_version:
        versions.append(f"torch {info.torch_version}")
    steps = f", {s.iterations:,} optimizer steps" if s.iterations else ""
    behind = sampling_behind_text(sampling_pace(profile))
    if behind is None:
        sampling = [f"  samples    {s.samples:,} every {info.interval_ms:g} ms{steps}"]
    else:  # "every N ms" would not be true: the line after says what it was
        sampling = [f"  samples    {s.samples:,}{steps}", f"  sampling   {behind}"]
    lines = [
        f"memsight profile {one(name)}",
        f"  run        {one(info.target)}",
        f"  directory  {one(info.cwd)}",
        f"  started    {one(info.start_time.replace('T', ' '))}"
        + (f" on {one(info.hostname)}" if info.hostname else "")
        + (f" ({', '.join(v for v in versions if v)})" if any(versions) else ""),
        f"  duration   {format_duration(s.duration_s)}",
        f"  ended      {info.ended_by}",
        *([f"  attached   {one(info.not_seen_text)}"] if info.not_seen_text else []),
        *sampling,
        "",
        "Peaks",
    ]

    def row(label: str, peak: Peak | None, absent: str) -> str:
        if peak is None:
            return f"  {label:<22} {absent}"
        return f"  {label:<22} {format_bytes(peak.bytes):>11}  at {format_duration(peak.t)}"

    lines.append(row("RAM, main process", s.ram, "no samples"))
    lines.append(row("RAM, process tree", s.ram_tree, "no samples"))
    no_gpu = "— (the run did not use CUDA)"
    lines.append(row("GPU allocated", s.gpu_allocated, no_gpu))
    lines.append(row("GPU reserved", s.gpu_reserved, no_gpu))
    if s.children:
        lines += ["", f"Child processes ({len(s.children)})"]
        for c in s.children[:20]:
            span = f"{format_duration(c.first_seen)} to " + (
                format_duration(c.exited) if c.exited is not None else "end"
            )
            lines.append(
                f"  pid {c.pid:<8} {one(c.name):<16} peak USS {format_bytes(c.peak_uss):>11}  {span}"
            )
        if len(s.children) > 20:
            lines.append(f"  … and {len(s.children) - 20} more")
    if profile.subprocesses:
        lines += ["", *_process_table(profile)]
    snapshots = cuda_snapshots(profile)
    if snapshots:
        lines += ["", f"CUDA memory snapshots ({len(snapshots)})"]
        lines += [f"  {one(describe_snapshot(c))}" for c in snapshots]
        lines.append(
            f"  for pytorch.org/memory_viz: memsight export {one(name)} --memory-viz OUT.pickle"
        )
    if profile.warnings:
        lines += ["", "Warnings"]
        lines += [f"  {one(w)}" for w in profile.warnings]
    return "\n".join(lines) + "\n"


def _process_table(profile: Profile) -> list[str]:
    """The job's processes, one line each: the per-rank table of `memsight report`."""
    processes = summarize_processes(profile)
    widths = {"process": -22, "role": -18, "peak_ram": 11, "peak_gpu": 11, "iterations": 10}

    def line(cells: dict[str, str]) -> str:
        columns = [f"{cells[key]:{'<' if w < 0 else '>'}{abs(w)}}" for key, w in widths.items()]
        return "  " + " ".join(columns) + "  " + cells["ended"]

    lines = [f"Processes of the job ({len(processes)})", line(dict(PROCESS_COLUMNS))]
    for p in processes[:64]:
        row = process_row(p)
        row["process"], row["ended"] = terminal_safe(row["process"]), terminal_safe(row["ended"])
        lines.append(line(row))
    if len(processes) > 64:
        lines.append(f"  … and {len(processes) - 64} more")
    return lines


def unrecorded_output(profile: Profile) -> str | None:
    """Why output is missing from the profile, in one sentence; None when it was recorded.

    `memsight run` gives the script its own stdout and stderr when they are files or pipes, so
    the script writes to them directly, with python's exact semantics, and memsight sees none
    of it.
    """
    named = {
        str(s) for e in profile.events_of("output_not_recorded") for s in e.get("streams") or []
    }
    streams = [s for s in ("stdout", "stderr") if s in named] + sorted(named - {"stdout", "stderr"})
    if not streams:
        return None
    which = " and ".join(streams)
    pronoun = "them" if len(streams) > 1 else "it"
    return (
        f"The script wrote its {which} straight to a file or pipe, as under plain python; "
        f"memsight did not record {pronoun}."
    )

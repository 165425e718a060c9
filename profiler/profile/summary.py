"""Key numbers of a profile: peaks with their times, the exit, children, counts.

`memsight report` prints these; `report --json` follows the schema in docs/architecture.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiler.profile.attachments import cuda_snapshots, describe_snapshot
from profiler.profile.model import Profile
from profiler.profile.processes import ProcessInfo
from profiler.profile.series import process_tree_bytes
from profiler.terminal_text import terminal_safe
from profiler.units import format_bytes, format_duration


@dataclass(frozen=True)
class Peak:
    bytes: int
    t: float  # seconds since the start of the run


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
        out.append(ProcessSummary(view.process, s.iterations, s.ram, s.gpu_allocated, ended))
    return out


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
    }


def to_json(profile: Profile, findings: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The `memsight report --json` object (schema in docs/architecture.md; keys may be added)."""
    s = summarize(profile)
    info = profile.info

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
    lines = [
        f"memsight profile {one(name)}",
        f"  run        {one(info.target)}",
        f"  directory  {one(info.cwd)}",
        f"  started    {one(info.start_time.replace('T', ' '))}"
        + (f" on {one(info.hostname)}" if info.hostname else "")
        + (f" ({', '.join(v for v in versions if v)})" if any(versions) else ""),
        f"  duration   {format_duration(s.duration_s)}",
        f"  ended      {info.ended_by}",
        f"  samples    {s.samples:,} every {info.interval_ms:g} ms"
        + (f", {s.iterations:,} optimizer steps" if s.iterations else ""),
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
    lines = [
        f"Processes of the job ({len(processes)})",
        f"  {'process':<22} {'role':<18} {'peak RAM':>11} {'peak GPU':>11} "
        f"{'iterations':>10}  ended",
    ]
    for p in processes[:64]:
        label = p.process.label if p.process.proc else f"{p.process.label} (target)"
        gpu = format_bytes(p.gpu_allocated.bytes) if p.gpu_allocated is not None else "—"
        ram = format_bytes(p.ram.bytes) if p.ram is not None else "—"
        lines.append(
            f"  {terminal_safe(label):<22} {p.process.role:<18} {ram:>11} {gpu:>11} "
            f"{p.iterations:>10,}  {p.ended_by}"
        )
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

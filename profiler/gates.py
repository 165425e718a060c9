"""Memory gates for CI: `memsight run --check ...` and `memsight compare ... --max-growth`.

A gate that fails gives one line saying which limit, by how much, and memsight exits with
GATE_FAILED, so CI can tell a memory regression from a script that failed (which keeps the
script's own exit status).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from profiler.profile.model import Profile
from profiler.profile.summary import summarize, summarize_processes
from profiler.units import format_bytes

if TYPE_CHECKING:  # the diagnosis is imported when a gate runs, not when memsight starts
    from profiler.comparison import Comparison
    from profiler.diagnosis import Diagnosis

GATE_FAILED = 3
FAIL_ON = ("warning", "critical")


def parse_percent(text: str) -> float:
    """ "10%", "10", "2.5 %" -> 0.10, 0.10, 0.025; ValueError for anything else."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*%?\s*", text)
    if match is None:
        raise ValueError(f"not a percentage: {text!r} (examples: 10%, 2.5%)")
    return float(match.group(1)) / 100.0


def findings_failures(diagnosis: Diagnosis, fail_on: str) -> list[str]:
    """A finding of severity `fail_on` or worse fails the check."""
    from profiler.diagnosis.finding import SEVERITY_ORDER

    worst = SEVERITY_ORDER[fail_on]
    failing = [f for f in diagnosis.findings if SEVERITY_ORDER[f.severity] <= worst]
    return [f"{f.severity} finding {f.rule}: {f.heading}" for f in failing]


def peak_failures(profile: Profile, max_ram: int | None, max_gpu: int | None) -> list[str]:
    """RAM: the process tree's peak (the job's, every process with its children); GPU: the
    largest allocated peak of any process on any device."""
    failures = []
    if max_ram is not None:
        tree = summarize(profile).ram_tree
        if tree is not None and tree.bytes > max_ram:
            failures.append(
                f"peak RAM of the process tree {format_bytes(tree.bytes)} is above "
                f"--max-peak-ram {format_bytes(max_ram)}"
            )
    processes = summarize_processes(profile)
    gpu = [(p.gpu_allocated.bytes, p.process.label) for p in processes if p.gpu_allocated]
    if max_gpu is not None and gpu:
        peak, label = max(gpu)
        if peak > max_gpu:
            who = f" ({label})" if len(processes) > 1 else ""
            failures.append(
                f"peak GPU allocated {format_bytes(peak)}{who} is above "
                f"--max-peak-gpu {format_bytes(max_gpu)}"
            )
    return failures


def growth_failures(comparison: Comparison, max_growth: float) -> list[str]:
    """Every peak present in both runs that grew by more than `max_growth` (a share)."""
    failures = []
    for change in comparison.peaks:
        relative = change.relative
        if relative is None or change.before is None or change.after is None:
            continue
        if relative > max_growth:
            failures.append(
                f"{change.label} grew {100 * relative:.1f} % "
                f"({format_bytes(change.before)} -> {format_bytes(change.after)}), more than "
                f"--max-growth {100 * max_growth:g} %"
            )
    return failures

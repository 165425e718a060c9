"""Memory gates for CI: `memsight run --check ...` and `memsight compare ... --max-growth`.

A gate that fails gives one line saying which limit, by how much, and memsight exits with
GATE_FAILED, so CI can tell a memory regression from a script that failed (which keeps the
script's own exit status).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memsight.profiler.typed_values import share_of_percent
from memsight.profiler.units import format_bytes

if TYPE_CHECKING:  # profiles and the diagnosis are imported when a gate runs, not at start
    from memsight.profiler.comparison import Change, Comparison
    from memsight.profiler.diagnosis import Diagnosis
    from memsight.profiler.profile.model import Profile

GATE_FAILED = 3
FAIL_ON = ("warning", "critical")


def parse_percent(text: str) -> float:
    """ "10%", "10", "2.5 %" -> 0.10, 0.10, 0.025, up to MAX_PERCENT; ValueError for anything
    else (typed_values.share_of_percent: ASCII digits, no infinity)."""
    return share_of_percent(text)


def findings_failures(diagnosis: Diagnosis, fail_on: str) -> list[str]:
    """A finding of severity `fail_on` or worse fails the check."""
    from memsight.profiler.diagnosis.finding import SEVERITY_ORDER

    worst = SEVERITY_ORDER[fail_on]
    failing = [f for f in diagnosis.findings if SEVERITY_ORDER[f.severity] <= worst]
    return [f"{f.severity} finding {f.rule}: {f.heading}" for f in failing]


def peak_failures(profile: Profile, max_ram: int | None, max_gpu: int | None) -> list[str]:
    """RAM: the process tree's peak (the job's, every process with its children); GPU: the
    largest allocated peak of any process on any device."""
    from memsight.profiler.profile.summary import summarize, summarize_processes

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


@dataclass(frozen=True)
class Baseline:
    """The peaks of an earlier run that `--baseline` compares a run with, read before the run."""

    path: str
    peaks: dict[str, float]  # bytes, by the label comparison.peak_changes gives each peak


def read_baseline(path: str) -> Baseline:
    """The peaks of the profile at `path`; ValueError (one line, naming the file) when it
    cannot be read or holds no peak to compare with. Read before the run starts, so a bad
    baseline stops it before the script runs, and the profile is not kept in memory."""
    from memsight.profiler.profile.storage import ProfileError, load_profile

    try:
        profile = load_profile(path)
    except ProfileError as exc:
        raise ValueError(str(exc)) from None
    peaks = peaks_of(profile)
    if not peaks:
        raise ValueError(f"{path}: the profile holds no memory peak to compare with (no samples)")
    return Baseline(path, peaks)


def peaks_of(profile: Profile) -> dict[str, float]:
    """Each peak a comparison weighs (comparison.peak_changes, one definition), by label."""
    from memsight.profiler.comparison import peak_changes

    return {c.label: c.before for c in peak_changes(profile, profile) if c.before is not None}


def baseline_failures(baseline: Baseline, profile: Profile, max_growth: float) -> list[str]:
    """Every peak of the baseline that grew in `profile` by more than `max_growth` (a share)."""
    from memsight.profiler.comparison import Change

    after = peaks_of(profile)
    changes = [
        Change(label, before, after[label], "bytes")
        for label, before in baseline.peaks.items()
        if label in after
    ]
    return _growth_lines(changes, max_growth)


def growth_failures(comparison: Comparison, max_growth: float) -> list[str]:
    """Every peak present in both runs that grew by more than `max_growth` (a share)."""
    return _growth_lines(comparison.peaks, max_growth)


def _growth_lines(changes: Iterable[Change], max_growth: float) -> list[str]:
    failures = []
    for change in changes:
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

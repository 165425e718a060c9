"""Two runs side by side (`memsight compare BEFORE AFTER`): what a change to the code did.

Peaks (RAM of the main process and of the process tree, GPU allocated and reserved per
device), the growth per iteration (the slope of memory between iterations, after the growth
rule's warm-up), the time per iteration, and the findings: resolved, new, and still there.
A finding is the same in both runs when its rule, its process (the rank, in a job) and, where
it names one, its first place in the code (file and line) are the same.

A change counts as significant when it is at least SIGNIFICANT_SHARE of the value before and
SIGNIFICANT_BYTES in size (peaks; SIGNIFICANT_BYTES_PER_ITERATION for growth per iteration;
time per iteration: SIGNIFICANT_SECONDS_SHARE): two recordings of the same script differ by
a few percent (allocator and sampling timing), which this keeps out. A number that only one
run has counts when it is at least that floor by itself: a short run of fast steps may read
the RSS too seldom to fit a growth, and a few bytes per iteration against none is no change.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memsight.profiler.diagnosis import Diagnosis, Finding, diagnose, finding_to_json
from memsight.profiler.diagnosis.config import DEFAULT_CONFIG
from memsight.profiler.diagnosis.signals import iteration_levels, linear_fit
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import iterations, memory_name
from memsight.profiler.profile.summary import Peak, summarize
from memsight.profiler.units import format_bytes, format_duration

SIGNIFICANT_SHARE = 0.05
SIGNIFICANT_BYTES = 8 * 1024 * 1024
SIGNIFICANT_BYTES_PER_ITERATION = 64 * 1024  # growth: 6.4 MiB over 100 iterations
SIGNIFICANT_SECONDS_SHARE = 0.10  # time per iteration: timing on a shared machine is noisier


@dataclass(frozen=True)
class Change:
    """One number before and after (None where that run does not have it)."""

    label: str
    before: float | None
    after: float | None
    kind: str  # "bytes", "bytes/iteration" or "seconds"

    @property
    def absolute(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return self.after - self.before

    @property
    def relative(self) -> float | None:
        """The change as a share of the value before; None without a value before."""
        delta = self.absolute
        if delta is None or not self.before:
            return None
        return delta / abs(self.before)

    @property
    def significant(self) -> bool:
        if self.before is None and self.after is None:
            return False
        floor = (
            SIGNIFICANT_BYTES_PER_ITERATION if self.kind == "bytes/iteration" else SIGNIFICANT_BYTES
        )
        delta = self.absolute
        if delta is None:
            # One run has the number and the other does not tell it (a device only one run
            # used, too few steps with the RSS read to fit a growth): a change from nothing,
            # which matters only when the number itself is as large as a significant change.
            present = self.before if self.before is not None else self.after
            assert present is not None
            return self.kind == "seconds" or abs(present) >= floor
        if self.kind == "seconds":
            relative = self.relative
            return relative is not None and abs(relative) >= SIGNIFICANT_SECONDS_SHARE
        if abs(delta) < floor:
            return False
        relative = self.relative
        return relative is None or abs(relative) >= SIGNIFICANT_SHARE


@dataclass
class FindingsChange:
    resolved: list[Finding] = field(default_factory=list)  # in the run before only
    new: list[Finding] = field(default_factory=list)  # in the run after only
    still: list[tuple[Finding, Finding]] = field(default_factory=list)  # (before, after)


@dataclass
class Comparison:
    before: Profile
    after: Profile
    peaks: list[Change]
    growth: list[Change]
    iteration_time: Change
    findings: FindingsChange
    aligned_by: str  # "iteration" when both runs have iterations, else "time"

    @property
    def same_script(self) -> bool:
        a, b = self.before.info, self.after.info
        return (a.module, _script_name(a.script)) == (b.module, _script_name(b.script))


def compare(
    before: Profile,
    after: Profile,
    before_diagnosis: Diagnosis | None = None,
    after_diagnosis: Diagnosis | None = None,
) -> Comparison:
    a_diag = before_diagnosis if before_diagnosis is not None else diagnose(before)
    b_diag = after_diagnosis if after_diagnosis is not None else diagnose(after)
    both_iterate = iterations(before) is not None and iterations(after) is not None
    return Comparison(
        before,
        after,
        peak_changes(before, after),
        _growth_changes(before, after),
        Change(
            "time per iteration", _time_per_iteration(before), _time_per_iteration(after), "seconds"
        ),
        _findings(a_diag.findings, b_diag.findings),
        "iteration" if both_iterate else "time",
    )


def peak_changes(before: Profile, after: Profile) -> list[Change]:
    """The peaks a summary reports (summary.summarize, one definition), and per CUDA device."""
    a, b = summarize(before), summarize(after)
    changes = [
        Change("peak RAM, main process", _bytes(a.ram), _bytes(b.ram), "bytes"),
        Change("peak RAM, process tree", _bytes(a.ram_tree), _bytes(b.ram_tree), "bytes"),
    ]
    devices = sorted(set(_device_peaks(before)) | set(_device_peaks(after)))
    for device in devices:
        for column, what in (("allocated_peak", "allocated"), ("reserved_peak", "reserved")):
            changes.append(
                Change(
                    f"peak GPU {what}, cuda:{device}",
                    _device_peaks(before).get(device, {}).get(column),
                    _device_peaks(after).get(device, {}).get(column),
                    "bytes",
                )
            )
    return changes


def _bytes(peak: Peak | None) -> float | None:
    return float(peak.bytes) if peak is not None else None


def _device_peaks(profile: Profile) -> dict[int, dict[str, float]]:
    gpu = profile.gpu
    if gpu is None:
        return {}
    out: dict[int, dict[str, float]] = {}
    for device in np.unique(gpu["device"]).tolist():
        mine = gpu["device"] == device
        out[int(device)] = {
            column: float(gpu[column][mine].max()) for column in ("allocated_peak", "reserved_peak")
        }
    return out


def growth_per_iteration(profile: Profile) -> dict[str, float]:
    """Bytes per iteration that memory between iterations climbs, per memory ("RAM",
    "GPU memory (cuda:0)", series.memory_name), fitted after the growth rule's warm-up; empty without iterations."""
    config = DEFAULT_CONFIG
    out = {}
    for levels in iteration_levels(profile, config.growth_samples_per_level):
        kept = levels.past_warmup(config)
        if kept.sum() < 2:
            continue
        fit = linear_fit(levels.index[kept].astype(np.float64), levels.bytes[kept])
        name = memory_name(levels.plot, levels.device)
        out[name] = fit.slope
    return out


def _growth_changes(before: Profile, after: Profile) -> list[Change]:
    a, b = growth_per_iteration(before), growth_per_iteration(after)
    return [
        Change(f"growth per iteration, {name}", a.get(name), b.get(name), "bytes/iteration")
        for name in sorted(set(a) | set(b))
    ]


def _time_per_iteration(profile: Profile) -> float | None:
    its = iterations(profile)
    if its is None or len(its) < 2:
        return None
    return float(np.median(np.diff(its.end)))


def _key(finding: Finding) -> tuple[object, ...]:
    process = finding.process.rank if finding.process is not None else None
    place = (
        (os.path.basename(finding.where[0].file), finding.where[0].line) if finding.where else None
    )
    return finding.rule, process, place


def _findings(before: list[Finding], after: list[Finding]) -> FindingsChange:
    """Matched by rule, process and place; a finding whose place moved (the code changed
    above it) still matches one of its rule and process left unmatched."""
    change = FindingsChange()
    left = list(after)
    unmatched = []
    for finding in before:
        match = next((f for f in left if _key(f) == _key(finding)), None)
        if match is None:
            unmatched.append(finding)
            continue
        left.remove(match)
        change.still.append((finding, match))
    for finding in unmatched:
        loose = next((f for f in left if _key(f)[:2] == _key(finding)[:2]), None)
        if loose is None:
            change.resolved.append(finding)
        else:
            left.remove(loose)
            change.still.append((finding, loose))
    change.new = left
    return change


def _script_name(script: str | None) -> str | None:
    return os.path.basename(script) if script else None


def aligned_times(c: Comparison, t: np.ndarray) -> np.ndarray:
    """Times `t` of the run before, moved onto the run after's axis.

    With iterations in both, iteration k of each lands at the same place: piecewise linear
    between their iteration ends, the times before the first iteration and after the last
    iteration both have shifted by the offset there. Otherwise both runs count from their
    start, and `t` stays as it is."""
    before, after = iterations(c.before), iterations(c.after)
    t = np.asarray(t, dtype=np.float64)
    if c.aligned_by != "iteration" or before is None or after is None:
        return t
    n = min(len(before), len(after))
    if n == 0:
        return t
    xb = np.concatenate([before.t[:1], before.end[:n]])
    xa = np.concatenate([after.t[:1], after.end[:n]])
    out: np.ndarray = np.interp(t, xb, xa)
    early, late = t < xb[0], t > xb[-1]
    out[early] = t[early] + (xa[0] - xb[0])
    out[late] = t[late] + (xa[-1] - xb[-1])
    return out


# -- text ------------------------------------------------------------------------------------


def format_comparison(c: Comparison, before_name: str, after_name: str) -> str:
    lines = [
        "memsight compare",
        f"  before  {before_name}: {_run(c.before)}",
        f"  after   {after_name}: {_run(c.after)}",
    ]
    if not c.same_script:
        lines.append("  (the runs are of different scripts: the numbers compare, the code may not)")
    lines += ["", f"  {'':<34} {'before':>12} {'after':>12}  change"]
    for change in changes(c):
        lines.append(
            f"  {change.label:<34} {value_text(change, change.before):>12} "
            f"{value_text(change, change.after):>12}  {change_text(change)}"
        )
    memory = [*c.peaks, *c.growth]
    if not any(change.significant for change in memory):
        lines.append("  No significant change in memory.")
    f = c.findings
    lines += ["", "Findings"]
    for word, found in (("resolved", f.resolved), ("new", f.new)):
        lines += [f"  {word:<9}{_finding(finding)}" for finding in found]
    lines += [f"  {'still':<9}{_finding(after)}" for _before, after in f.still]
    if not (f.resolved or f.new or f.still):
        lines.append("  none in either run")
    lines += [
        "",
        f"* marks a change of at least {100 * SIGNIFICANT_SHARE:g} % and "
        f"{format_bytes(SIGNIFICANT_BYTES)} (growth: "
        f"{format_bytes(SIGNIFICANT_BYTES_PER_ITERATION)} per iteration; time: "
        f"{100 * SIGNIFICANT_SECONDS_SHARE:g} %);",
        "smaller ones are within the noise between two recordings of one script.",
    ]
    return "\n".join(lines) + "\n"


def changes(c: Comparison) -> list[Change]:
    """The rows every view of a comparison shows: peaks, growth, time; those in a run."""
    every = (*c.peaks, *c.growth, c.iteration_time)
    return [change for change in every if change.before is not None or change.after is not None]


def _run(profile: Profile) -> str:
    info = profile.info
    return (
        f"{info.target}  ({info.start_time.replace('T', ' ')[:19]}, "
        f"{format_duration(profile.duration)}, {info.ended_by})"
    )


def value_text(change: Change, value: float | None) -> str:
    """One side of a change as the text, the HTML page and the app show it."""
    if value is None:
        return "—"
    if change.kind == "seconds":
        return format_duration(value)
    text = format_bytes(abs(value))
    if change.kind == "bytes/iteration":
        return ("-" if value < 0 else "+") + text
    return text


def change_text(change: Change) -> str:
    """The change itself, "-538.1 MiB (-58.4 %) *", "*" when it is significant."""
    delta = change.absolute
    if delta is None:
        return "only in one run"
    mark = " *" if change.significant else ""
    relative = change.relative
    share = f" ({100 * relative:+.1f} %)" if relative is not None else ""
    if change.kind == "seconds":
        return f"{delta:+.3f} s{share}{mark}"
    return f"{'-' if delta < 0 else '+'}{format_bytes(abs(delta))}{share}{mark}"


def _finding(finding: Finding) -> str:
    return f"[{finding.severity}] {finding.rule}: {finding.heading}"


# -- JSON ------------------------------------------------------------------------------------


def change_to_json(change: Change) -> dict[str, Any]:
    return {
        "label": change.label,
        "before": change.before,
        "after": change.after,
        "absolute": change.absolute,
        "relative": change.relative,
        "significant": change.significant,
    }


def comparison_to_json(c: Comparison) -> dict[str, Any]:
    def run(profile: Profile) -> dict[str, Any]:
        info = profile.info
        return {
            "file": profile.source,
            "script": f"-m {info.module}" if info.module else info.script,
            "argv": info.argv,
            "start_time": info.start_time,
            "exit_code": info.exit_code,
            "signal": info.signal,
            "iterations": profile.iterations,
        }

    f = c.findings
    return {
        "before": run(c.before),
        "after": run(c.after),
        "same_script": c.same_script,
        "aligned_by": c.aligned_by,
        "peaks": [change_to_json(x) for x in c.peaks],
        "growth_per_iteration": [change_to_json(x) for x in c.growth],
        "time_per_iteration": change_to_json(c.iteration_time),
        "findings": {
            "resolved": [finding_to_json(x) for x in f.resolved],
            "new": [finding_to_json(x) for x in f.new],
            "still": [finding_to_json(after) for _before, after in f.still],
        },
    }

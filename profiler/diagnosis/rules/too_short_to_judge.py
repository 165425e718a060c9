"""too-short-to-judge: memory moved, but the run ended before a rule could judge it (info).

growth-per-iteration fits a line through memory between iterations (optimizer steps, or the
backward passes or batches of forwards of a loop without an optimizer) and needs
growth_min_iterations of them before it says anything. A finished run with fewer gets no
finding from it, which alone would read as "no problems" even where memory climbed all along.
This rule says what could not be judged, and why: the rule that needed more, how much it saw,
and how far memory moved (RAM, and each CUDA device).

It stays quiet while a run is still being recorded (the minimum may yet be reached), on runs
long enough for the growth rule, on runs without iterations (the growth rule judges those
over time, not per iteration), and on runs where memory did not move by the amount the
growth rule would report: the rise at iteration boundaries, after the warm-up that rule leaves
out, is held to that rule's own size thresholds.
"""

from __future__ import annotations

from dataclasses import dataclass

from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding, Plot
from memsight.profiler.diagnosis.signals import iteration_levels
from memsight.profiler.diagnosis.span import finished
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import memory_name
from memsight.profiler.protocol import OPTIMIZER_STEPS
from memsight.profiler.units import format_bytes

RULE_ID = "too-short-to-judge"
EXPLANATION = (
    "Memory moved during this run, but the run ended before memsight had enough of it to tell "
    "a leak from a warm-up: a steady climb over a few steps looks the same as a cache filling "
    "once or an allocator settling. The evidence names the rule that needed more and how much "
    "it saw. Record the run for longer (a few dozen optimizer steps, or a full epoch) to get a "
    "verdict; if memory climbs by the same amount every step, the usual causes are below."
)


@dataclass(frozen=True)
class _Unjudged:
    text: str
    start: float
    end: float
    plot: Plot
    iterations: tuple[int, int] | None
    numbers: dict[str, float | int | str | None]


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    if not finished(profile):
        return []  # still running: the minimums may yet be reached
    unjudged = _growth(profile, config)
    if not unjudged:
        return []
    first = unjudged[0]
    numbers: dict[str, float | int | str | None] = {}
    for item in unjudged:
        for key, value in item.numbers.items():
            numbers.setdefault(key, value)
    return [
        Finding(
            RULE_ID,
            "info",
            "The run was too short to judge whether memory keeps growing",
            EXPLANATION,
            Evidence(
                "; ".join(item.text for item in unjudged),
                min(item.start for item in unjudged),
                max(item.end for item in unjudged),
                first.plot,
                first.iterations,
                numbers,
            ),
            ("record-longer", "detach-for-logging", "del-and-scope"),
        )
    ]


def _growth(profile: Profile, config: DiagnosisConfig) -> list[_Unjudged]:
    """growth-per-iteration's minimum, per RAM and CUDA device, where the level rose."""
    out = []
    needed = config.growth_min_iterations
    for levels in iteration_levels(profile):
        n = levels.count
        if n >= needed:
            continue  # long enough: the growth rule judged it
        skip = max(config.growth_warmup_min_steps, int(n * config.growth_warmup_fraction))
        kept = levels.index > skip  # the warm-up the growth rule leaves out
        if int(kept.sum()) < config.too_short_min_measured:
            continue
        base, last = float(levels.bytes[kept][0]), float(levels.bytes[-1])
        rise = last - base
        gpu = levels.plot == "gpu"
        min_rise = config.growth_min_bytes_gpu if gpu else config.growth_min_bytes_ram
        if rise < min_rise or (base > 0 and rise < config.growth_min_relative * base):
            continue  # nothing moved that the growth rule would report
        first, end = int(levels.index[kept][0]), int(levels.index[-1])
        where = memory_name(levels.plot, levels.device)
        per_step = rise / max(1, end - first)
        if levels.kind == OPTIMIZER_STEPS:
            made, word = f"optimizer steps and the run made {n}", "step"
        else:  # a loop without optimizer steps: the growth rule counts these instead
            made, word = f"iterations and the run made {n} ({levels.kind})", "iteration"
        text = (
            f"growth-per-iteration needs at least {needed} {made}; meanwhile {where} at "
            f"iteration boundaries rose {format_bytes(rise)} from {word} {first} to {word} "
            f"{end} ({format_bytes(per_step)} per {word})"
        )
        key = f"cuda{levels.device}" if gpu else "ram"
        out.append(
            _Unjudged(
                text,
                float(levels.t[kept][0]),
                float(levels.t[-1]),
                "gpu" if gpu else "ram",
                (first, end),
                {
                    "iterations": n,
                    "iterations_needed": needed,
                    "iteration_kind": levels.kind,
                    f"{key}_rise_bytes": round(rise),
                    f"{key}_rise_per_iteration_bytes": round(per_step),
                },
            )
        )
    return out

"""growth-per-iteration: memory between iterations keeps rising (warning).

Iterations are the loop's, whatever its shape (profiler.profile.series.iterations): optimizer
steps, where the agent reads memory in the step hook; else backward passes (weights updated by
hand) or batches of outermost forwards (inference), where the level between iterations is the
floor of the RAM / GPU samples. A level that climbs iteration after iteration means something
from each iteration stays alive: a summed loss tensor holding its graph, outputs kept in a
list, a cache without a bound. Told apart from look-alikes by three tests on the iterations
after a warm-up share: a straight line fits (r²), the fitted growth is large in bytes and
against the starting level, and the last part of the run still climbs at a good share of the
overall rate (a cache that fills once, or allocator warm-up, flattens out).

A run with no iterations at all (tensor code, feature extraction without a module) is judged
over time instead: the same tests on a line fitted to the floor of equal time slices of the
RAM / GPU timeline, after torch was imported, over at least growth_time_min_s.

Evidence numbers: per iteration, `bytes_per_iteration`, `iterations`, `iterations_are`
("optimizer steps", "backward passes" or "forward passes"), `r2`, `growth_bytes`,
`start_bytes`, `tail_bytes_per_iteration`, `device`; over time, `bytes_per_second`,
`seconds`, `iterations_are` (null), `r2`, `growth_bytes`, `start_bytes`,
`tail_bytes_per_second`, `device`.
"""

from __future__ import annotations

import numpy as np

from profiler.diagnosis.config import DiagnosisConfig
from profiler.diagnosis.finding import Evidence, Finding
from profiler.diagnosis.signals import (
    FloatArray,
    IterationLevels,
    LinearFit,
    iteration_levels,
    linear_fit,
    sampled_series,
)
from profiler.profile.model import Profile
from profiler.profile.series import BACKWARD_PASSES, FORWARD_PASSES, iterations
from profiler.units import format_bytes, format_duration

RULE_ID = "growth-per-iteration"
EXPLANATION = (
    "Between iterations the loop should return to the same memory level: the batch, the "
    "activations and the graph of the finished iteration are freed. Here the level climbs by "
    "about the same amount every iteration, so something created in each iteration is still "
    "referenced. Typical causes: adding the loss tensor (not loss.item()) to a running total, "
    "appending outputs or losses that still carry their graph to a list, or a cache that "
    "grows without bound. Left alone, the run fails once the growth reaches the limit."
)
EXPLANATION_OVER_TIME = (
    "Memory climbs steadily for the whole run instead of settling at a working level. The run "
    "has no training or inference loop memsight can count (no module, no optimizer), so the "
    "growth is measured over time. Something made along the way stays referenced: results "
    "appended to a list, a cache or dictionary without a bound, tensors kept with their "
    "autograd graph. Left alone, the run fails once the growth reaches the limit."
)
FIXES = ("detach-for-logging", "del-and-scope")
# How an iteration is named in the evidence, by what marks it.
_ITERATION_WORDS = {BACKWARD_PASSES: "backward pass", FORWARD_PASSES: "batch"}


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    if iterations(profile) is None:
        return [f for f in _over_time(profile, config) if f]
    levels = iteration_levels(profile, config.growth_samples_per_level)
    return [f for level in levels if (f := _check(level, config))]


def _where(plot: str, device: int | None) -> str:
    return "RAM" if plot == "ram" else f"GPU memory (cuda:{device})"


def _growing(
    x: FloatArray, y: FloatArray, plot: str, config: DiagnosisConfig
) -> tuple[LinearFit, float, float, LinearFit] | None:
    """The fit, growth and starting level when (x, y) passes the size and still-growing tests.

    r² is left to the caller, whose threshold depends on what x is.
    """
    fit = linear_fit(x, y)
    span = float(x[-1] - x[0])
    growth = fit.slope * span
    start_level = fit.at(float(x[0]))
    min_growth = config.growth_min_bytes_gpu if plot == "gpu" else config.growth_min_bytes_ram
    if fit.slope <= 0 or growth < min_growth:
        return None
    if start_level > 0 and growth < config.growth_min_relative * start_level:
        return None
    tail = x >= x[-1] - config.growth_tail_fraction * span
    tail_fit = linear_fit(x[tail], y[tail])
    if tail_fit.slope < config.growth_tail_share * fit.slope:
        return None
    return fit, growth, start_level, tail_fit


def _check(levels: IterationLevels, config: DiagnosisConfig) -> Finding | None:
    n = levels.count
    if n < config.growth_min_iterations:
        return None
    skip = max(config.growth_warmup_min_steps, int(n * config.growth_warmup_fraction))
    kept = levels.index > skip
    x = levels.index[kept].astype(np.float64)
    y = levels.bytes[kept]
    if levels.readings(levels.index[kept]) < config.growth_min_iterations // 2:
        return None  # too few levels read: a loop too short for the sampling interval
    result = _growing(x, y, levels.plot, config)
    if result is None or result[0].r2 < config.growth_min_r2:
        return None
    fit, growth, start_level, tail_fit = result
    first, last = int(x[0]), int(levels.index[-1])
    steps = last - first
    where = _where(levels.plot, levels.device)
    word = _ITERATION_WORDS.get(levels.kind)
    if word is None:  # optimizer steps: the words memsight has always used
        text = (
            f"+{format_bytes(fit.slope)} per iteration over {steps} iterations "
            f"(r² {fit.r2:.2f}): {format_bytes(growth)} in all"
        )
    else:
        text = (
            f"+{format_bytes(fit.slope)} per iteration over {steps} iterations "
            f"(r² {fit.r2:.2f}): {format_bytes(growth)} in all; no optimizer steps, so each "
            f"{word} is an iteration, memory read between them from the samples"
        )
    return Finding(
        RULE_ID,
        "warning",
        f"{where} grows by {format_bytes(fit.slope)} every iteration",
        EXPLANATION,
        Evidence(
            text,
            float(levels.t[kept][0]),
            float(levels.t[-1]),
            "gpu" if levels.plot == "gpu" else "ram",
            (first, last),
            {
                "bytes_per_iteration": round(fit.slope, 1),
                "iterations": steps,
                "iterations_are": levels.kind,
                "r2": round(fit.r2, 4),
                "growth_bytes": round(growth),
                "start_bytes": round(start_level),
                "tail_bytes_per_iteration": round(tail_fit.slope, 1),
                "device": levels.device,
            },
        ),
        FIXES,
    )


def _over_time(profile: Profile, config: DiagnosisConfig) -> list[Finding | None]:
    imported = next(profile.events_of("torch_imported"), None)
    begin = imported.t if imported is not None else 0.0
    return [
        _check_over_time(plot, device, t, level, begin, config)
        for plot, device, t, level, _peak in sampled_series(profile)
    ]


def _check_over_time(
    plot: str,
    device: int | None,
    t: FloatArray,
    level: np.ndarray,
    begin: float,
    config: DiagnosisConfig,
) -> Finding | None:
    after = t >= begin
    t, level = t[after], level[after]
    if len(t) < 2:
        return None
    warmup = max(config.growth_time_warmup_min_s, (t[-1] - t[0]) * config.growth_warmup_fraction)
    start = t[0] + warmup
    seconds = float(t[-1] - start)
    if seconds < config.growth_time_min_s:
        return None
    slices = config.growth_time_slices
    edges = np.linspace(start, float(t[-1]), slices + 1)
    which = np.searchsorted(edges, t, side="right") - 1
    which[t == t[-1]] = slices - 1  # the last sample closes the last slice
    inside = (which >= 0) & (which < slices)
    which, values = which[inside], level[inside]
    starts = np.flatnonzero(np.diff(which, prepend=-1))
    if len(starts) < slices // 2:
        return None
    floors = np.minimum.reduceat(values, starts) * 1.0
    index = which[starts]
    # What exiting frees is not the run: end before the first drop in the last moments.
    last = edges[index] >= edges[-1] - config.growth_time_teardown_s
    drops = np.flatnonzero(last[1:] & (floors[1:] < floors[:-1])) + 1
    if len(drops):
        index, floors = index[: drops[0]], floors[: drops[0]]
    if len(floors) < slices // 2:
        return None
    x = (edges[index] + edges[index + 1]) / 2
    end = float(edges[index[-1] + 1])
    result = _growing(x, floors, plot, config)
    if result is None or result[0].r2 < config.growth_time_min_r2:
        return None
    fit, growth, start_level, tail_fit = result
    seconds = end - float(start)
    where = _where(plot, device)
    text = (
        f"{where} grows {format_bytes(fit.slope)}/s for {format_duration(seconds)} "
        f"(r² {fit.r2:.2f}): {format_bytes(growth)} in all; no training or inference loop to "
        "count iterations, so this is growth over time"
    )
    return Finding(
        RULE_ID,
        "warning",
        f"{where} grows steadily over time, by {format_bytes(fit.slope)} every second",
        EXPLANATION_OVER_TIME,
        Evidence(
            text,
            float(start),
            end,
            "gpu" if plot == "gpu" else "ram",
            None,
            {
                "bytes_per_second": round(fit.slope, 1),
                "seconds": round(seconds, 3),
                "iterations_are": None,
                "r2": round(fit.r2, 4),
                "growth_bytes": round(growth),
                "start_bytes": round(start_level),
                "tail_bytes_per_second": round(tail_fit.slope, 1),
                "device": device,
            },
        ),
        FIXES,
    )

"""growth-per-iteration: memory at iteration boundaries keeps rising (warning).

Memory is read at every optimizer step, where one iteration's temporaries are gone and the
next one's have not been made, so a level that climbs step after step means something from
each iteration stays alive: a summed loss tensor holding its graph, outputs kept in a list,
a cache without a bound. Told apart from look-alikes by three tests on the steps after a
warm-up share: a straight line fits (r²), the fitted growth is large in bytes and against the
starting level, and the last part of the run still climbs at a good share of the overall
rate (a cache that fills once, or allocator warm-up, flattens out).
"""

from __future__ import annotations

import numpy as np

from profiler.diagnosis.config import DiagnosisConfig
from profiler.diagnosis.finding import Evidence, Finding
from profiler.diagnosis.signals import IterationLevels, iteration_levels, linear_fit
from profiler.profile.model import Profile
from profiler.units import format_bytes

RULE_ID = "growth-per-iteration"
EXPLANATION = (
    "Between optimizer steps the loop should return to the same memory level: the batch, the "
    "activations and the graph of the finished iteration are freed. Here the level climbs by "
    "about the same amount every iteration, so something created in each iteration is still "
    "referenced. Typical causes: adding the loss tensor (not loss.item()) to a running total, "
    "appending outputs or losses that still carry their graph to a list, or a cache that "
    "grows without bound. Left alone, the run fails once the growth reaches the limit."
)


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    return [f for levels in iteration_levels(profile) if (f := _check(levels, config))]


def _check(levels: IterationLevels, config: DiagnosisConfig) -> Finding | None:
    n = len(levels.bytes)
    if n < config.growth_min_iterations:
        return None
    skip = max(config.growth_warmup_min_steps, int(n * config.growth_warmup_fraction))
    x = levels.index[skip:].astype(np.float64)
    y = levels.bytes[skip:]
    if len(x) < config.growth_min_iterations // 2:
        return None
    fit = linear_fit(x, y)
    span = float(x[-1] - x[0])
    growth = fit.slope * span
    start_level = fit.at(float(x[0]))
    min_growth = (
        config.growth_min_bytes_gpu if levels.plot == "gpu" else config.growth_min_bytes_ram
    )
    if fit.slope <= 0 or growth < min_growth or fit.r2 < config.growth_min_r2:
        return None
    if start_level > 0 and growth < config.growth_min_relative * start_level:
        return None
    tail = x >= x[-1] - config.growth_tail_fraction * span
    tail_fit = linear_fit(x[tail], y[tail])
    if tail_fit.slope < config.growth_tail_share * fit.slope:
        return None
    first, last = int(levels.index[skip]), int(levels.index[-1])
    steps = last - first
    where = "RAM" if levels.plot == "ram" else f"GPU memory (cuda:{levels.device})"
    text = (
        f"+{format_bytes(fit.slope)} per iteration over {steps} iterations "
        f"(r² {fit.r2:.2f}): {format_bytes(growth)} in all"
    )
    return Finding(
        RULE_ID,
        "warning",
        f"{where} grows by {format_bytes(fit.slope)} every iteration",
        EXPLANATION,
        Evidence(
            text,
            float(levels.t[skip]),
            float(levels.t[-1]),
            "gpu" if levels.plot == "gpu" else "ram",
            (first, last),
            {
                "bytes_per_iteration": round(fit.slope, 1),
                "iterations": steps,
                "r2": round(fit.r2, 4),
                "growth_bytes": round(growth),
                "start_bytes": round(start_level),
                "tail_bytes_per_iteration": round(tail_fit.slope, 1),
                "device": levels.device,
            },
        ),
        ("detach-for-logging", "del-and-scope"),
    )

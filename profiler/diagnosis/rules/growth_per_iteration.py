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

For RAM, a climb that is memory glibc's malloc keeps after the program freed it (its free
bytes grew, its live allocations did not: the agent's `heap` table) is left to
allocator-retention (info); see Growth.retained_by_allocator.

A run with no iterations at all (tensor code, feature extraction without a module) is judged
over time instead: the same tests on a line fitted to the floor of equal time slices of the
RAM / GPU timeline, after torch was imported, over at least growth_time_min_s.

Evidence numbers: per iteration, `bytes_per_iteration`, `iterations`, `iterations_are`
("optimizer steps", "backward passes" or "forward passes"), `r2`, `growth_bytes`,
`start_bytes`, `tail_bytes_per_iteration`, `device`; over time, `bytes_per_second`,
`seconds`, `iterations_are` (null), `r2`, `growth_bytes`, `start_bytes`,
`tail_bytes_per_second`, `device`. Both: `judged_on` ("memory", or "live_allocations" where
RSS climbed in steps and malloc's live allocations were fitted instead, with
`ram_rise_bytes`). With malloc readings, also `heap_in_use_growth_bytes` and
`heap_free_growth_bytes`.
"""

from __future__ import annotations

from dataclasses import replace

from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding, Location
from memsight.profiler.diagnosis.growth import Growth, growths
from memsight.profiler.diagnosis.holders import growing_holders, locations, unnamed_because
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import memory_name
from memsight.profiler.protocol import BACKWARD_PASSES, FORWARD_PASSES
from memsight.profiler.units import format_bytes, format_duration

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
    found = []
    for g in growths(profile, config):
        if g.retained_by_allocator(config):
            continue
        where = _where_held(profile, g)
        span = (g.start_s, g.end_s)
        note = None if where else unnamed_because(profile, g.iterations_are, span)
        found.append(replace(_finding(g), where=where, where_note=note))
    return found


def _where_held(profile: Profile, g: Growth) -> tuple[Location, ...]:
    """The holders the agent's censuses saw gaining memory over the growth's span."""
    pace = None
    if g.iterations is not None and g.end_s > g.start_s:
        pace = (g.iterations[1] - g.iterations[0]) / (g.end_s - g.start_s)
    span = (g.start_s, g.end_s)
    found = growing_holders(profile, g.iterations_are, span, g.held_rate(), pace)
    return locations(found, "iteration" if g.iterations is not None else "second", g.fit.slope)


def _finding(g: Growth) -> Finding:
    place = memory_name(g.plot, g.device)
    numbers = g.numbers()
    if g.iterations is not None:
        climb = (
            f"+{format_bytes(g.fit.slope)} per iteration over {numbers['iterations']} "
            f"iterations (r² {g.fit.r2:.2f}): {format_bytes(g.growth)} in all"
        )
        text = climb if g.ram_rise is None else _live_text(place, climb, g.ram_rise)
        word = _ITERATION_WORDS.get(g.iterations_are or "")
        if word is not None:  # not optimizer steps: say what an iteration is
            text += (
                f"; no optimizer steps, so each {word} is an iteration, memory read between "
                "them from the samples"
            )
        title = f"{place} grows by {format_bytes(g.fit.slope)} every iteration"
        explanation = EXPLANATION
        numbers["tail_bytes_per_iteration"] = round(g.tail.slope, 1)
    else:
        climb = (
            f"{format_bytes(g.fit.slope)}/s for {format_duration(g.end_s - g.start_s)} "
            f"(r² {g.fit.r2:.2f}): {format_bytes(g.growth)} in all"
        )
        text = (
            f"{place} grows {climb}" if g.ram_rise is None else _live_text(place, climb, g.ram_rise)
        )
        text += "; no training or inference loop to count iterations, so this is growth over time"
        title = f"{place} grows steadily over time, by {format_bytes(g.fit.slope)} every second"
        explanation = EXPLANATION_OVER_TIME
        numbers["tail_bytes_per_second"] = round(g.tail.slope, 1)
    if g.heap is not None and g.ram_rise is None and g.heap.free >= 0.25 * g.growth:
        text += (
            f"; live allocations grew {format_bytes(max(0.0, g.heap.in_use))}, and "
            f"{format_bytes(g.heap.free)} more is free memory malloc keeps between them"
        )
    return Finding(
        RULE_ID,
        "warning",
        title,
        explanation,
        Evidence(
            text,
            g.start_s,
            g.end_s,
            "gpu" if g.plot == "gpu" else "ram",
            g.iterations,
            numbers,
        ),
        FIXES,
    )


def _live_text(place: str, climb: str, ram_rise: float) -> str:
    """The evidence of a climb judged on malloc's live allocations (Growth.ram_rise)."""
    return (
        f"{place}'s live allocations grow {climb}; {place} rose {format_bytes(ram_rise)} "
        "meanwhile, in steps, as malloc handed out memory freed earlier"
    )

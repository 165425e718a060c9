"""Memory that climbs steadily: the measurement behind growth-per-iteration (its finding) and
allocator-retention (a climb malloc's kept free memory explains).

Per iteration: the levels between the loop's iterations (signals.iteration_levels), after the
warm-up (IterationLevels.past_warmup), must fit a straight line (r²), grow by enough in bytes
and against their start, and still climb at the end at a good share of the overall rate.
Where RSS climbed in steps, malloc's live allocations between iterations are fitted instead,
held to a lower size floor: they are read exactly, with no iteration's temporaries in them.
A run without iterations is judged over time, on the floors of equal time slices after torch
was imported and up to the end of the script (diagnosis/span.py). Each climb is a Growth,
with what malloc's counts did over it (HeapGrowth).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.signals import (
    FloatArray,
    IterationLevels,
    LinearFit,
    group_floors,
    heap_at,
    iteration_levels,
    linear_fit,
    live_levels,
    sampled_series,
)
from memsight.profiler.diagnosis.span import script_end, trend_start
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import iterations


@dataclass(frozen=True)
class Growth:
    """A level that climbs steadily: per iteration (`iterations` set) or over time.

    For RAM, with the agent's malloc readings (agent/heap.py), also how the bytes in live
    malloc allocations and the bytes malloc keeps free grew over the same span; None where
    that is not known (GPU memory, a run without heap readings).
    """

    plot: str
    device: int | None
    fit: LinearFit
    growth: float
    start_level: float
    tail: LinearFit
    start_s: float
    end_s: float
    iterations: tuple[int, int] | None  # first and last iteration; None over time
    iterations_are: str | None
    heap: HeapGrowth | None
    # Set when the fit is of malloc's live allocations, not of the level itself: RAM rose by
    # this much meanwhile, in steps, as malloc handed out memory freed earlier (see
    # _live_over_time). None when the level itself climbed steadily.
    ram_rise: float | None = None

    def held_rate(self) -> float:
        """The growth's rate that holders share (per iteration, or per second): of live
        allocations where malloc's were read and grew slower than the level, since many small
        kept tensors climb RSS mostly by the holes between them, which no holder keeps."""
        rate = self.fit.slope
        heap = self.heap
        if heap is None or heap.in_use <= 0 or self.ram_rise is not None:
            return rate
        units = (
            float(self.iterations[1] - self.iterations[0])
            if self.iterations is not None
            else self.end_s - self.start_s
        )
        return min(rate, heap.in_use / units) if units > 0 else rate

    def retained_by_allocator(self, config: DiagnosisConfig) -> bool:
        """The climb is memory malloc keeps after it was freed, not memory something holds.

        Live malloc allocations did not grow steadily (kept tensors grow them, however small:
        an 8 KiB tensor kept per batch can pin a 2 MiB hole between freed temporaries, and
        those holes then grow the free bytes too, without bound), the free bytes grew by most
        of the climb, and what is left of it besides them is too little for the size tests
        (Python objects live outside malloc's heaps).
        """
        heap = self.heap
        if heap is None or heap.live_growing(config):
            return False
        return heap.free >= config.heap_retention_min_share * self.growth and not _large(
            self.growth - heap.free, self.start_level, _min_growth(self.plot, config), config
        )

    def numbers(self) -> dict[str, float | int | str | None]:
        """The evidence numbers every finding on this climb carries: its rate over its span
        (per iteration, or per second over time), its fit and size, the device, and malloc's
        counts where they were read."""
        numbers: dict[str, float | int | str | None]
        if self.iterations is not None:
            numbers = {
                "bytes_per_iteration": round(self.fit.slope, 1),
                "iterations": self.iterations[1] - self.iterations[0],
                "iterations_are": self.iterations_are,
            }
        else:
            numbers = {
                "bytes_per_second": round(self.fit.slope, 1),
                "seconds": round(self.end_s - self.start_s, 3),
                "iterations_are": None,
            }
        numbers.update(
            r2=round(self.fit.r2, 4),
            growth_bytes=round(self.growth),
            start_bytes=round(self.start_level),
            device=self.device,
            judged_on="memory" if self.ram_rise is None else "live_allocations",
        )
        if self.ram_rise is not None:
            numbers["ram_rise_bytes"] = round(self.ram_rise)
        if self.heap is not None:
            numbers["heap_in_use_growth_bytes"] = round(self.heap.in_use)
            numbers["heap_free_growth_bytes"] = round(self.heap.free)
        return numbers


@dataclass(frozen=True)
class HeapGrowth:
    """How malloc's counts moved over a climb's span (the agent's `heap` table)."""

    in_use: float  # bytes in live allocations: growth of a line through the floors of slices
    in_use_r2: float
    free: float  # bytes kept free in the heaps: growth along the fitted levels

    def live_growing(self, config: DiagnosisConfig) -> bool:
        return (
            self.in_use >= config.heap_live_min_bytes and self.in_use_r2 >= config.heap_live_min_r2
        )


def growths(profile: Profile, config: DiagnosisConfig) -> list[Growth]:
    """Every level that climbs steadily (RAM, each CUDA device), before telling what holds it."""
    if iterations(profile) is None:
        return [g for g in _over_time(profile, config) if g]
    levels = iteration_levels(profile, config.growth_samples_per_level)
    return [g for level in levels if (g := _per_iteration(profile, level, config))]


def _min_growth(plot: str, config: DiagnosisConfig) -> int:
    """The size test's floor in bytes for a level of this plot ("ram" or "gpu")."""
    return config.growth_min_bytes_gpu if plot == "gpu" else config.growth_min_bytes_ram


def _large(growth: float, start_level: float, floor: int, config: DiagnosisConfig) -> bool:
    """The size tests: at least `floor` bytes, and large against the starting level."""
    if growth < floor:
        return False
    return not (start_level > 0 and growth < config.growth_min_relative * start_level)


def _growing(
    x: FloatArray, y: FloatArray, floor: int, config: DiagnosisConfig
) -> tuple[LinearFit, float, float, LinearFit] | None:
    """The fit, growth and starting level when (x, y) passes the size tests (at least `floor`
    bytes) and the still-growing test.

    r² is left to the caller, whose threshold depends on what x is.
    """
    fit = linear_fit(x, y)
    span = float(x[-1] - x[0])
    growth = fit.slope * span
    start_level = fit.at(float(x[0]))
    if fit.slope <= 0 or not _large(growth, start_level, floor, config):
        return None
    tail = x >= x[-1] - config.growth_tail_fraction * span
    tail_fit = linear_fit(x[tail], y[tail])
    if tail_fit.slope < config.growth_tail_share * fit.slope:
        return None
    return fit, growth, start_level, tail_fit


def _heap_growth(
    profile: Profile, plot: str, t: FloatArray, x: FloatArray, config: DiagnosisConfig
) -> HeapGrowth | None:
    """malloc's counts over the fitted levels (times t, positions x), for RAM.

    The free bytes are read at the levels' times. Live allocations are judged on the readings
    taken between iterations (at optimizer steps) where the span has at least heap_slices of
    them, as many points as the floors below would give, each exact; other readings
    include the temporaries of whatever iteration they fell in, so then on the floor (lowest
    reading) of each of heap_slices equal slices of the span, which a steady growth of kept
    tensors moves and temporaries do not.
    """
    heap = profile.table("heap") if plot == "ram" else None
    read = heap_at(profile, t) if heap is not None else None
    if heap is None or read is None:
        return None
    span = float(x[-1] - x[0])
    free = linear_fit(x, read[1]).slope * span
    inside = (heap.t >= t[0]) & (heap.t <= t[-1])
    between = inside & (heap["between"] == 1) if "between" in heap.column_names else inside & False
    slices = config.heap_slices
    if between.sum() >= slices:
        # Read between iterations: no iteration's temporaries in them, a line through all.
        fit = linear_fit(heap.t[between], heap["in_use"][between] * 1.0)
        return HeapGrowth(fit.slope * float(t[-1] - t[0]), fit.r2, free)
    when, in_use = heap.t[inside], heap["in_use"][inside] * 1.0
    if len(when) < slices:
        return None  # too few readings to tell live allocations from temporaries
    edges = np.linspace(float(t[0]), float(t[-1]), slices + 1)
    which = np.minimum(np.searchsorted(edges, when, side="right") - 1, slices - 1)
    index, floors = group_floors(which, in_use)
    if len(index) < slices - 1:
        return None
    fit = linear_fit((edges[index] + edges[index + 1]) / 2, floors)
    return HeapGrowth(fit.slope * float(t[-1] - t[0]), fit.r2, free)


def _growth(
    profile: Profile,
    plot: str,
    device: int | None,
    t: FloatArray,
    x: FloatArray,
    result: tuple[LinearFit, float, float, LinearFit],
    span: tuple[float, float],
    iterations: tuple[int, int] | None,
    iterations_are: str | None,
    config: DiagnosisConfig,
) -> Growth:
    fit, growth, start_level, tail_fit = result
    return Growth(
        plot, device, fit, growth, start_level, tail_fit, span[0], span[1], iterations,
        iterations_are, _heap_growth(profile, plot, t, x, config),
    )  # fmt: skip


def _per_iteration(
    profile: Profile, levels: IterationLevels, config: DiagnosisConfig
) -> Growth | None:
    judged = _after_warmup(levels, config)
    if judged is None:
        return None
    t, x, y = judged
    result = _growing(x, y, _min_growth(levels.plot, config), config)
    ram_rise = None
    if result is None or result[0].r2 < config.growth_min_r2:
        live = _live_per_iteration(profile, x, y, config) if levels.plot == "ram" else None
        if live is None:
            return None
        t, x, result, ram_rise = live
    growth = _growth(
        profile, levels.plot, levels.device, t, x, result,
        (float(t[0]), float(levels.t[-1])), (int(x[0]), int(levels.index[-1])), levels.kind,
        config,
    )  # fmt: skip
    return growth if ram_rise is None else replace(growth, ram_rise=ram_rise)


def _after_warmup(
    levels: IterationLevels, config: DiagnosisConfig
) -> tuple[FloatArray, FloatArray, FloatArray] | None:
    """(times, iteration numbers, bytes) of the levels the line is fitted to: those after the
    warm-up, where the run has enough iterations and enough of their levels were read."""
    n = levels.count
    if n < config.growth_min_iterations:
        return None
    kept = levels.past_warmup(config)
    if levels.readings(levels.index[kept]) < config.growth_min_iterations // 2:
        return None  # too few levels read: a loop too short for the sampling interval
    return levels.t[kept], levels.index[kept].astype(np.float64), levels.bytes[kept]


def _live_per_iteration(
    profile: Profile, x: FloatArray, y: FloatArray, config: DiagnosisConfig
) -> tuple[FloatArray, FloatArray, tuple[LinearFit, float, float, LinearFit], float] | None:
    """RAM's climb judged on malloc's live allocations between iterations, where the RSS
    levels (x, y) fail the line or still-growing test (see _live_over_time: kept tensors
    carved out of the holes freed temporaries left make RSS stand still for a while, then
    climb again). The live levels must pass every test, and RSS must still have risen by a
    size that counts over the same iterations. Returns the live levels' times and iteration
    numbers, their fit as _growing gives it, and RSS's rise."""
    live = live_levels(profile, config.growth_samples_per_level)
    live_judged = _after_warmup(live, config) if live is not None else None
    if live_judged is None:
        return None
    live_t, live_x, live_y = live_judged
    # Read exactly, with no iteration's temporaries in them: a floor of their own.
    result = _growing(live_x, live_y, config.growth_min_bytes_live, config)
    if result is None or result[0].r2 < config.growth_min_r2:
        return None
    # The live growth passed the size tests against its own start; RSS, what the user sees,
    # must have risen by a size that counts over the same iterations too.
    rise, start = _rise(x, y)
    large = _large(rise, start, config.growth_min_bytes_live, config)
    return (live_t, live_x, result, rise) if large else None


def _rise(x: FloatArray, y: FloatArray) -> tuple[float, float]:
    """How far RAM rose over its levels (x, y), by a line through them, and where it started."""
    ram = linear_fit(x, y)
    return ram.slope * float(x[-1] - x[0]), ram.at(float(x[0]))


def _ram_rise(
    x: FloatArray, y: FloatArray, live_growth: float, config: DiagnosisConfig
) -> float | None:
    """How far RAM rose over its levels (x, y) where that rise and the live allocations'
    growth both pass the size tests against RAM's starting level; None where either does
    not."""
    rise, start = _rise(x, y)
    floor = config.growth_min_bytes_ram
    if _large(rise, start, floor, config) and _large(live_growth, start, floor, config):
        return rise
    return None


def _over_time(profile: Profile, config: DiagnosisConfig) -> list[Growth | None]:
    begin = trend_start(profile)
    if begin is None:
        return []  # a live run still importing torch: its climb is not the program's yet
    ended = script_end(profile) is not None
    return [
        _check_over_time(profile, plot, device, t, level, begin, ended, config)
        for plot, device, t, level, _peak in sampled_series(profile)
    ]


def _check_over_time(
    profile: Profile,
    plot: str,
    device: int | None,
    t: FloatArray,
    level: np.ndarray,
    begin: float,
    ended: bool,
    config: DiagnosisConfig,
) -> Growth | None:
    after = t >= begin
    t, level = t[after], level[after]
    if len(t) < 2:
        return None
    warmup = max(config.growth_time_warmup_min_s, (t[-1] - t[0]) * config.growth_warmup_fraction)
    start = float(t[0] + warmup)
    seconds = float(t[-1] - start)
    if seconds < config.growth_time_min_s:
        return None
    slices = config.growth_time_slices
    edges = np.linspace(start, float(t[-1]), slices + 1)
    which = np.searchsorted(edges, t, side="right") - 1
    which[t == t[-1]] = slices - 1  # the last sample closes the last slice
    inside = (which >= 0) & (which < slices)
    which, values = which[inside], level[inside]
    index, floors = group_floors(which, values)
    if len(index) < slices // 2:
        return None
    if not ended:
        # No mark of the script's end (a killed run, an older profile): what exiting frees is
        # not the run, so end before the first drop in the last moments.
        last = edges[index] >= edges[-1] - config.growth_time_teardown_s
        drops = np.flatnonzero(last[1:] & (floors[1:] < floors[:-1])) + 1
        if len(drops):
            index, floors = index[: drops[0]], floors[: drops[0]]
        if len(floors) < slices // 2:
            return None
    x = (edges[index] + edges[index + 1]) / 2
    end = float(edges[index[-1] + 1])
    result = _growing(x, floors, _min_growth(plot, config), config)
    if result is not None and result[0].r2 >= config.growth_time_min_r2:
        return _growth(profile, plot, device, x, x, result, (start, end), None, None, config)
    if plot != "ram":
        return None
    return _live_over_time(profile, edges, index, x, floors, (start, end), config)


def _live_over_time(
    profile: Profile,
    edges: FloatArray,
    index: np.ndarray,
    x: FloatArray,
    floors: FloatArray,
    span: tuple[float, float],
    config: DiagnosisConfig,
) -> Growth | None:
    """RAM's climb judged on malloc's live allocations, where RSS itself climbs in steps.

    Kept tensors among freed temporaries make RSS climb unevenly: the temporaries' holes
    pile up as free heap, then for a while the kept tensors are carved out of those holes and
    RSS stands still (seen: 1.7 s flat in a 6 s leak of 20 MiB/s, r² of RSS 0.91 one run and
    below 0.9 the next). The bytes in live allocations (the agent's `heap` table) climb
    straight through. So when RSS alone fails the line test, the same tests are run on the
    floor of the live allocations in the same slices, and RSS must still have risen by a
    size that counts over the span.
    """
    heap = profile.table("heap")
    if heap is None:
        return None
    slices = config.growth_time_slices
    which = np.searchsorted(edges, heap.t, side="right") - 1
    kept = np.isin(which, index)
    live_index, live_floors = group_floors(which[kept], heap["in_use"][kept])
    if len(live_index) < slices // 2:
        return None
    live_x = (edges[live_index] + edges[live_index + 1]) / 2
    result = _growing(live_x, live_floors, config.growth_min_bytes_ram, config)
    if result is None or result[0].r2 < config.growth_time_min_r2:
        return None
    ram_rise = _ram_rise(x, floors, result[1], config)
    if ram_rise is None:
        return None
    return replace(
        _growth(profile, "ram", None, x, x, result, span, None, None, config), ram_rise=ram_rise
    )

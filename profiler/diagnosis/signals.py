"""Measurements several rules share: fits, capacities, levels at iteration boundaries.

Everything here reads a Profile and returns numbers; nothing decides whether a rule fires.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from memsight.profiler import protocol
from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.profile.model import Event, Profile, SampleTable
from memsight.profiler.profile.series import Iterations, iterations, process_tree
from memsight.profiler.protocol import OPTIMIZER_STEPS

FloatArray = np.ndarray


@dataclass(frozen=True)
class LinearFit:
    slope: float  # units of y per unit of x
    intercept: float
    r2: float  # 1.0 for a perfect line; 0 when the line explains nothing

    def at(self, x: float) -> float:
        return self.intercept + self.slope * x


def linear_fit(x: FloatArray, y: FloatArray) -> LinearFit:
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) < 2 or float(np.ptp(x)) == 0.0:
        return LinearFit(0.0, float(y.mean()) if len(y) else 0.0, 0.0)
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    sxy = float(((x - xm) * (y - ym)).sum())
    slope = sxy / sxx
    intercept = float(ym - slope * xm)
    ss_tot = float(((y - ym) ** 2).sum())
    ss_res = float(((y - (intercept + slope * x)) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0
    return LinearFit(float(slope), intercept, max(0.0, r2))


@dataclass(frozen=True)
class Capacity:
    bytes: int
    label: str  # "the RAM budget of 6.00 GiB", "the cgroup limit", "system RAM"


def ram_capacity(profile: Profile) -> Capacity | None:
    """The smallest of the user's budget, the cgroup limit and the machine's RAM."""
    info = profile.info
    options = [
        (info.ram_budget_bytes, "the run's RAM budget"),
        (info.memory_limit_bytes, "the memory limit (cgroup)"),
        (info.ram_total_bytes, "the machine's RAM"),
    ]
    known = [(b, label) for b, label in options if b is not None and b > 0]
    if not known:
        return None
    best = min(known, key=lambda item: item[0])
    return Capacity(int(best[0]), best[1])


def gpu_devices(profile: Profile) -> list[int]:
    gpu = profile.gpu
    if gpu is None:
        return []
    devices = gpu["device"]
    if bool((devices == devices[0]).all()):
        return [int(devices[0])]
    return sorted(int(d) for d in np.unique(devices))


def gpu_rows(profile: Profile, device: int) -> SampleTable | None:
    gpu = profile.gpu
    if gpu is None:
        return None
    devices = gpu["device"]
    if devices[0] == devices[-1] == device and bool((devices == device).all()):
        return gpu  # one device, the usual case: no copy
    rows = gpu.where("device", device)
    return rows if len(rows) else None


def device_total(profile: Profile, device: int) -> int | None:
    for info in profile.info.devices:
        if info.index == device and info.total_bytes > 0:
            return info.total_bytes
    nvml = profile.table("nvml")
    if nvml is not None and len(nvml):
        totals = nvml["total"][nvml["device"] == device]
        if len(totals) and int(totals.max()) > 0:
            return int(totals.max())
    return None


def final_exception(profile: Profile) -> Event | None:
    """The error that ended the script, if one did, completed from its earlier sightings.

    An exception first seen inside a forward knows its phase and iteration; the uncaught
    sighting at the top level shares its id but not always those details.
    """
    last = None
    for event in profile.events_of("exception"):
        if event.get("uncaught"):
            last = event
    if last is None or last.get("exc_id") is None:
        return last
    data = dict(last.data)
    for earlier in profile.events_of("exception"):
        if earlier is not last and earlier.get("exc_id") == last.get("exc_id"):
            for key, value in earlier.data.items():
                if data.get(key) in (None, {}, []):
                    data[key] = value
    return Event(last.t, last.type, data)


@dataclass(frozen=True)
class IterationLevels:
    """Memory between iterations: what persists from one iteration to the next.

    For optimizer steps, the levels the agent read in the step hook, one per step. For the
    other kinds of iterations (profiler.profile.series.iterations), the floor of the samples
    from the end of an iteration to the end of the next: where they are too sparse for one
    floor per iteration (iterations shorter than the sampling interval), the floor of a few
    consecutive iterations, given to each of them.
    """

    plot: str  # "ram" or "gpu"
    device: int | None
    t: FloatArray
    index: np.ndarray  # the iteration numbers (1-based)
    bytes: FloatArray
    kind: str  # what an iteration is: series.OPTIMIZER_STEPS, BACKWARD_PASSES, FORWARD_PASSES
    count: int  # iterations in the run
    group: int = 1  # consecutive iterations sharing one level (iteration k: group (k-1)//group)

    def readings(self, index: np.ndarray) -> int:
        """How many distinct levels were read for these iterations."""
        groups = (index - 1) // self.group
        if len(groups) > 1 and bool(np.all(groups[1:] >= groups[:-1])):
            # In order, as iterations are: count the changes (np.unique sorts or hashes
            # every value, seconds for the million iterations of a day-long run).
            return 1 + int(np.count_nonzero(groups[1:] != groups[:-1]))
        return len(np.unique(groups))

    def past_warmup(self, config: DiagnosisConfig) -> np.ndarray:
        """Which levels a growth per iteration is fitted to, by the growth rule and by
        `memsight compare` alike: those after the warm-up (growth_warmup_fraction of the
        iterations, at least growth_warmup_min_steps), where the first batches, the
        optimizer's state and the allocator's cache have settled."""
        skip = max(config.growth_warmup_min_steps, int(self.count * config.growth_warmup_fraction))
        return np.asarray(self.index > skip)


def iteration_levels(profile: Profile, samples_per_level: int = 3) -> Iterator[IterationLevels]:
    """Levels between the run's iterations (profiler.profile.series.iterations), for RAM (the
    main process's RSS) and, per CUDA device in use, for PyTorch's allocated memory; nothing
    for a run without iterations. samples_per_level: DiagnosisConfig.growth_samples_per_level.
    """
    its = iterations(profile)
    if its is None:
        return
    steps = profile.steps
    if its.kind == OPTIMIZER_STEPS and steps is not None:
        yield from _step_levels(steps, len(its))
        return
    for plot, device, t, level, _peak in sampled_series(profile):
        floors = _floors(its, t, level, samples_per_level)
        if floors is not None:
            index, floor, group = floors
            yield IterationLevels(
                plot, device, its.end[index - 1], index, floor, its.kind, len(its), group
            )


def live_levels(profile: Profile, samples_per_level: int = 3) -> IterationLevels | None:
    """malloc's live allocations between the run's iterations (the agent's `heap` table),
    as RAM levels: the floor of the readings of each iteration, or of each group of
    iterations where the readings are sparser (as for samples, in iteration_levels); None
    without iterations or readings.

    The floor leaves out the temporaries of the iteration a reading fell in; a reading taken
    between iterations (in the optimizer step hook) holds none.
    """
    its = iterations(profile)
    heap = profile.table("heap")
    if its is None or heap is None or not len(heap):
        return None
    floors = _floors(its, heap.t, heap["in_use"], samples_per_level)
    if floors is None:
        return None
    index, floor, group = floors
    return IterationLevels("ram", None, its.end[index - 1], index, floor, its.kind, len(its), group)


def _step_levels(steps: SampleTable, count: int) -> Iterator[IterationLevels]:
    rss = steps["rss"]
    keep = rss >= 0
    if keep.any():
        yield IterationLevels(
            "ram", None, steps.t[keep], steps["index"][keep], rss[keep] * 1.0,
            OPTIMIZER_STEPS, count,
        )  # fmt: skip
    devices = steps["device"]
    allocated = steps["allocated"]
    for device in np.unique(devices[devices >= 0]):
        keep = (devices == device) & (allocated >= 0)
        if keep.any():
            yield IterationLevels(
                "gpu", int(device), steps.t[keep], steps["index"][keep], allocated[keep] * 1.0,
                OPTIMIZER_STEPS, count,
            )  # fmt: skip


def group_floors(group: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, FloatArray]:
    """The groups that hold readings and the floor (lowest value) of each, as floats.

    `group` numbers each reading's group (a slice of time, a run of iterations), readings in
    time order, so a group's readings are consecutive; group numbers are never negative.
    The floor leaves out temporaries that come and go within a group.
    """
    starts = np.flatnonzero(np.diff(group, prepend=-1))
    return group[starts], np.minimum.reduceat(values, starts) * 1.0


def _floors(
    its: Iterations, t: FloatArray, level: np.ndarray, samples_per_level: int
) -> tuple[np.ndarray, FloatArray, int] | None:
    """(iteration, level) for each iteration whose level the samples (t, level) tell, and
    how many iterations share a level.

    Iteration k owns the samples from its end to the next iteration's end; samples before the
    first iteration ends or after the last one ends belong to none. The level is the floor of
    the samples of a group of consecutive iterations, of one iteration unless the samples are
    too sparse (samples_per_level per group on average); every iteration of a group that has
    samples gets its floor.
    """
    n = len(its)
    owner = np.searchsorted(its.end, t, side="right")  # iterations ended by each sample
    keep = (owner >= 1) & (owner < n)
    owner, values = owner[keep], level[keep]
    if not len(owner):
        return None
    group = max(1, -(-samples_per_level * (n - 1) // len(owner)))  # iterations per group
    chunks, floors = group_floors((owner - 1) // group, values)
    index = (chunks[:, None] * group + 1 + np.arange(group)[None, :]).ravel()
    floor = np.repeat(floors, group)
    inside = index < n  # the last iteration's level would come after the run's last boundary
    return index[inside].astype(np.int64), floor[inside], group


def sampled_series(
    profile: Profile,
) -> Iterator[tuple[str, int | None, FloatArray, np.ndarray, np.ndarray]]:
    """(plot, device, t, level, peak between samples) for the main process's RSS and, per
    CUDA device, PyTorch's allocated memory, as sampled through the run."""
    ram = profile.ram
    if ram is not None and len(ram):
        yield "ram", None, ram.t, ram["rss"], ram["rss_peak"]
    for device in gpu_devices(profile):
        rows = gpu_rows(profile, device)
        if rows is not None and len(rows):
            yield "gpu", device, rows.t, rows["allocated"], rows["allocated_peak"]


def heap_at(profile: Profile, t: FloatArray) -> tuple[FloatArray, FloatArray] | None:
    """Bytes in live malloc allocations and bytes malloc keeps free in its heaps at times `t`
    (the agent's `heap` table, read every 50 ms, interpolated), or None without readings."""
    heap = profile.table("heap")
    if heap is None or len(heap) < 2:
        return None
    in_use: FloatArray = np.interp(t, heap.t, heap["in_use"] * 1.0)
    free: FloatArray = np.interp(t, heap.t, heap["free"] * 1.0)
    return in_use, free


def rise_during(
    t: FloatArray, level: np.ndarray, peak: np.ndarray, start: FloatArray, end: FloatArray
) -> FloatArray:
    """How far memory rose above its level at `start` before `end`, per window; NaN where the
    samples do not tell (no sample before the window, none at or after its end).

    The level before is the last sample at or before the start; the height is the highest
    level or between-sample peak of the samples from just after the start to the first one
    at or after the end, so a window shorter than the sampling interval is still covered
    (together with whatever else ran in the intervals around it).
    """
    out = np.full(len(start), np.nan)
    if not len(t) or not len(start):
        return out
    before = np.searchsorted(t, start, side="right") - 1
    after = np.searchsorted(t, end, side="left")
    ok = (before >= 0) & (after < len(t)) & (after > before)
    if not ok.any():
        return out
    height = np.maximum(level, peak).astype(np.float64)
    first, last = before[ok] + 1, after[ok] + 1  # samples [first, last)
    bounds = np.empty(2 * len(first), dtype=np.int64)
    bounds[0::2], bounds[1::2] = first, last
    padded = np.append(height, 0.0)  # so that a window may end at the last sample
    highest = np.maximum.reduceat(padded, bounds)[0::2]
    out[ok] = highest - level[before[ok]]
    return out


def forward_rows(profile: Profile) -> Mapping[str, np.ndarray] | None:
    """The spans table's forward rows, each column taken when first asked for (a rule reads
    two or three of a day-long run's 2.6 million spans' seven columns)."""
    spans = profile.spans
    if spans is None:
        return None
    forward = spans["kind"] == protocol.SPAN_FORWARD
    if not forward.any():
        return None
    return _RowsWhere(spans, forward)


class _RowsWhere(Mapping[str, np.ndarray]):
    """A table's rows where `mask` holds, column by column on demand."""

    def __init__(self, table: SampleTable, mask: np.ndarray) -> None:
        self._table = table
        self._mask = mask
        self._taken: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        column = self._taken.get(name)
        if column is None:
            column = self._taken[name] = self._table[name][self._mask]
        return column

    def __iter__(self) -> Iterator[str]:
        return iter(self._table.column_names)

    def __len__(self) -> int:
        return len(self._table.column_names)


def linked_forward_ids(profile: Profile) -> np.ndarray:
    """Ids of forwards a backward pass went through."""
    spans = profile.spans
    if spans is None:
        return np.empty(0, dtype=np.int64)
    return distinct(spans["id"][spans["kind"] == protocol.SPAN_LINK])


def distinct(values: np.ndarray) -> np.ndarray:
    """np.unique(values), by a sort and a comparison of neighbours: for the millions of
    spans of a day-long run several times faster than np.unique's hashing here."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def backward_count(profile: Profile) -> int:
    spans = profile.spans
    if spans is None:
        return 0
    return int((spans["kind"] == protocol.SPAN_BACKWARD).sum())


def breakdown(profile: Profile, where: str) -> dict[str, int] | None:
    """Largest measured parameters / gradients / optimizer state on 'cpu' or 'gpu'."""
    steps = profile.steps
    if steps is None:
        return None
    out = {}
    for part in ("params", "grads", "state"):
        column = steps[f"{part}_{where}"]
        measured = column[column >= 0]
        if not len(measured):
            return None
        out[part] = int(measured.max())
    return out


def step_at(profile: Profile, when: float) -> int | None:
    """Optimizer steps completed at time `when`."""
    steps = profile.steps
    if steps is None:
        return None
    return int(np.searchsorted(steps["end"], when, side="right"))


# -- how the run ended ------------------------------------------------------------------------

# Stops that come from outside the script (the user, a job scheduler) rather than from it.
STOPPED_FROM_OUTSIDE = ("KeyboardInterrupt",)

# Signals that mean the interpreter itself crashed (an extension's bug, an abort()).
CRASH_SIGNALS = {
    int(sig): sig.name
    for sig in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL)
}

MESSAGE_CHARS = 300


def oom_kind(profile: Profile, config: DiagnosisConfig) -> str | None:
    """'gpu', 'cpu', 'python' or 'killed' when the run ended in an OOM, else None."""
    exc = final_exception(profile)
    if exc is not None and exc.get("oom"):
        return str(exc.get("oom"))
    if killed_near_limit(profile, config) is not None:
        return "killed"
    return None


def killed_near_limit(profile: Profile, config: DiagnosisConfig) -> tuple[float, int] | None:
    if profile.info.signal != signal.SIGKILL:
        return None
    capacity = ram_capacity(profile)
    tree = process_tree(profile)
    if capacity is None or tree is None:
        return None
    t, used = tree
    end = float(t[-1])
    recent = t >= end - config.oom_kill_window_s
    peak = int(used[recent].max())
    ram = profile.ram
    assert ram is not None
    available = ram["available"][recent]
    total = profile.info.ram_total_bytes or 0
    near = peak >= config.oom_kill_fraction * capacity.bytes or (
        total > 0
        and len(available)
        and int(available.min()) <= (1 - config.oom_kill_fraction) * total
    )
    return (end, peak) if near else None

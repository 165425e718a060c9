"""Measurements several rules share: fits, capacities, levels at iteration boundaries.

Everything here reads a Profile and returns numbers; nothing decides whether a rule fires.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from profiler import protocol
from profiler.profile.model import Event, Profile, SampleTable

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
    """Memory at each optimizer step, as the agent read it in the step hook."""

    plot: str  # "ram" or "gpu"
    device: int | None
    t: FloatArray
    index: np.ndarray  # the step numbers
    bytes: FloatArray


def iteration_levels(profile: Profile) -> Iterator[IterationLevels]:
    """Levels for RAM (rss) and, per CUDA device in use, for PyTorch's allocated memory."""
    steps = profile.steps
    if steps is None:
        return
    rss = steps["rss"]
    keep = rss >= 0
    if keep.any():
        yield IterationLevels("ram", None, steps.t[keep], steps["index"][keep], rss[keep] * 1.0)
    devices = steps["device"]
    allocated = steps["allocated"]
    for device in np.unique(devices[devices >= 0]):
        keep = (devices == device) & (allocated >= 0)
        if keep.any():
            yield IterationLevels(
                "gpu", int(device), steps.t[keep], steps["index"][keep], allocated[keep] * 1.0
            )


def forward_rows(profile: Profile) -> dict[str, np.ndarray] | None:
    spans = profile.spans
    if spans is None:
        return None
    forward = spans["kind"] == protocol.SPAN_FORWARD
    if not forward.any():
        return None
    return {name: spans[name][forward] for name in spans.column_names}


def linked_forward_ids(profile: Profile) -> np.ndarray:
    """Ids of forwards a backward pass went through."""
    spans = profile.spans
    if spans is None:
        return np.empty(0, dtype=np.int64)
    return np.unique(spans["id"][spans["kind"] == protocol.SPAN_LINK])


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

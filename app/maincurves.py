"""Which rows of a run the timeline's main curves take in: the process tree, the main
process' RSS, its peak and its workers on the RAM plot; allocated, its peak, reserved and the
device's used memory (NVML) on the GPU plot, for the device the script allocated on first.

Qt-free, so the one definition serves both the timeline as rows arrive and a worker thread
that makes a finished day-long run's curves ready before they are shown (prepare_curves).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memsight.app.curvepoints import CurvePoints
from memsight.profiler.profile.model import Profile, SampleTable
from memsight.profiler.profile.series import (
    DEVICE_USED,
    GPU_ALLOCATED,
    GPU_ALLOCATED_PEAK,
    GPU_RESERVED,
    MAIN_PEAK,
    MAIN_RSS,
    PROCESS_TREE,
    WORKERS,
    process_tree_bytes,
)

# Each plot's main series, in drawing order: the main curves on top of their peaks and the tree.
RAM_SERIES = (MAIN_PEAK, PROCESS_TREE, WORKERS, MAIN_RSS)
GPU_SERIES = (GPU_ALLOCATED_PEAK, DEVICE_USED, GPU_RESERVED, GPU_ALLOCATED)
# The main process' own curves: a job shown whole draws each process' RSS instead.
OWN_RAM_SERIES = (MAIN_RSS, MAIN_PEAK, WORKERS)
# The GPU curves read from the torch allocator's table (the other, DEVICE_USED, from NVML's).
ALLOCATOR_KEYS = (GPU_ALLOCATED.key, GPU_ALLOCATED_PEAK.key, GPU_RESERVED.key)


def take_in_ram(
    curves: Mapping[str, CurvePoints], ram: SampleTable | None, whole_job: bool
) -> list[str]:
    """Extend the RAM curves by the `ram` rows they have not taken in; the keys extended.
    `whole_job`: the main process' own curves are left out (the job's curves draw them)."""
    tree = curves[PROCESS_TREE.key]
    if ram is None or len(ram) == tree.source_rows:
        return []
    start, rows = tree.source_rows, len(ram)
    t = ram.t[start:rows]
    tree.extend(t, process_tree_bytes(ram, start, rows), rows)
    if whole_job:
        return [PROCESS_TREE.key]
    for series in OWN_RAM_SERIES:
        curves[series.key].extend(t, ram[series.key][start:rows], rows)
    return [PROCESS_TREE.key, *(series.key for series in OWN_RAM_SERIES)]


def take_in_gpu(
    curves: Mapping[str, CurvePoints], profile: Profile, device: int | None
) -> tuple[int | None, list[str]]:
    """Extend the GPU curves by the rows of `device` they have not taken in (None: the device
    of the first GPU row, once there is one); (that device, the keys extended)."""
    gpu = profile.gpu
    if gpu is None:
        return device, []
    if device is None:
        if not len(gpu):
            return None, []
        device = int(gpu["device"][0])  # the device the script allocated on first
    extended: list[str] = []
    start, rows = curves[GPU_ALLOCATED.key].source_rows, len(gpu)
    if rows > start:
        mine = gpu["device"][start:rows] == device
        t = gpu.t[start:rows][mine]
        for key in ALLOCATOR_KEYS:
            curves[key].extend(t, gpu[key][start:rows][mine], rows)
        extended += ALLOCATOR_KEYS
    nvml = profile.table("nvml")
    used = curves[DEVICE_USED.key]
    if nvml is not None and len(nvml) > used.source_rows:
        start, rows = used.source_rows, len(nvml)
        mine = nvml["device"][start:rows] == device
        used.extend(nvml.t[start:rows][mine], nvml["used"][start:rows][mine], rows)
        extended.append(DEVICE_USED.key)
    return device, extended


@dataclass(frozen=True)
class PreparedCurves:
    """A finished run's main curves made ready (levels built) for the timeline to adopt."""

    profile: Profile
    device: int | None  # the GPU curves' device; None: no GPU row
    points: dict[str, CurvePoints]


def prepare_curves(profile: Profile) -> PreparedCurves:
    """The main curves of `profile` shown whole as the timeline first shows an opened run
    (the whole job, where it has other processes), taken in and thinned: the work of
    showing a day-long run's 8.6 million samples, done before the GUI thread sees it."""
    points = {series.key: CurvePoints() for series in (*RAM_SERIES, *GPU_SERIES)}
    whole_job = bool(profile.subprocesses)
    take_in_ram(points, profile.ram, whole_job)
    device = None
    if not whole_job:  # a job shown whole draws each process' GPU memory instead
        device, _ = take_in_gpu(points, profile, None)
    for curve in points.values():
        curve.build_levels()
    return PreparedCurves(profile, device, points)

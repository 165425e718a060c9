"""The processes of a job on the timeline: their order and names, each one's own RSS and GPU
memory drawn side by side (the whole-job view), and the errors of the processes other than the
target, as marks named by rank.

A single-process run has none of this: the timeline then draws exactly what it always did.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from memsight.app.plotting import Curve, make_curve
from memsight.profiler.profile.model import Event, Profile
from memsight.profiler.profile.series import MAIN_RSS, Series
from memsight.profiler.profile.summary import process_name
from memsight.profiler.units import format_bytes

# The other processes of a job (ranks, spawned workers): colours apart from the target's series.
PROCESS_COLORS = ("#e377c2", "#bcbd22", "#8c564b", "#17becf", "#9467bd", "#7f7f7f")
# A process' second, third ... device: its colour, another line style.
DEVICE_STYLES = (
    Qt.PenStyle.SolidLine,
    Qt.PenStyle.DashLine,
    Qt.PenStyle.DotLine,
    Qt.PenStyle.DashDotLine,
)
WHOLE_JOB = -1  # the selector's entry for the whole job (the others hold process numbers)


def job_order(job: Profile) -> list[Profile]:
    """The target first, then the other processes by rank; those without one after, in the
    order they connected (the recorder numbers them so)."""
    others = sorted(
        job.subprocesses.values(),
        key=lambda p: (p.process.rank is None, p.process.rank or 0, p.process.proc),
    )
    return [job, *others]


def choice_label(profile: Profile) -> str:
    """How the selector names a process: "rank 1", or "pid 4242 (target)" for process 0."""
    return process_name(profile.process)


def rss_label(profile: Profile) -> str:
    """A process' own RSS curve: "rank 1 (RSS)"."""
    return f"{profile.process.label} (RSS)"


def peak_label(profile: Profile) -> str:
    return f"{profile.process.label}, peak between samples"


def gpu_label(profile: Profile, device: int) -> str:
    """A process' allocated memory on one device: "rank 1 · cuda:1 allocated"."""
    return f"{profile.process.label} · cuda:{device} allocated"


def process_color(profile: Profile) -> str:
    number = profile.process.proc
    return MAIN_RSS.color if number == 0 else PROCESS_COLORS[(number - 1) % len(PROCESS_COLORS)]


@dataclass(frozen=True)
class ProcessMark:
    """An error of a process other than the target, on the target's time axis."""

    t: float
    label: str  # "rank 1: OOM: OutOfMemoryError", the mark's tooltip
    line_label: str  # "rank 1: OOM": short, as the line's label sits beside the legend
    oom: bool
    line: bool  # drawn across the plots (an OOM or an uncaught exception), not only as a mark


def event_label(kind: str, exc_type: object, oom: bool) -> str:
    """How an error event is named in the lane: "OOM: OutOfMemoryError", "error: ValueError"."""
    if kind == "oom_observed":
        return "OOM (allocator)"
    return f"{'OOM' if oom else 'error'}: {str(exc_type or '').rsplit('.', 1)[-1]}"


def later_sighting(event: Event, seen: set[int]) -> bool:
    """Whether `event` is an exception already seen (its id in `seen`, which it joins).

    The agent reports an exception where it is raised (an OOM in a forward) and again when
    it reaches the top level uncaught, under one id: one error, marked once.
    """
    exc_id = event.get("exc_id") if event.type == "exception" else None
    if not isinstance(exc_id, int):
        return False
    if exc_id in seen:
        return True
    seen.add(exc_id)
    return False


def process_marks(job: Profile, limit: int) -> list[ProcessMark]:
    """The exceptions and allocator OOMs of every process but the target, at most `limit`."""
    marks: list[ProcessMark] = []
    for sub in job_order(job)[1:]:
        seen: set[int] = set()
        for event in sub.events_of("exception", "oom_observed"):
            if len(marks) >= limit:
                return marks
            if later_sighting(event, seen):
                continue
            oom = event.type == "oom_observed" or bool(event.get("oom"))
            label = event_label(event.type, event.get("exc_type"), oom)
            marks.append(
                ProcessMark(
                    event.t,
                    f"{sub.process.label}: {label}",
                    f"{sub.process.label}: {'OOM' if oom else 'error'}",
                    oom,
                    event.type == "exception" and (oom or bool(event.get("uncaught"))),
                )
            )
    return marks


def event_count(job: Profile) -> int:
    """Events of the processes other than the target: the marks change when this does."""
    return sum(len(sub.events) for sub in job.subprocesses.values())


class JobCurves:
    """The whole-job view's curves: each process' RSS on the RAM plot and its allocated memory
    on each device it used on the GPU plot, taken in by new rows only as a live job grows."""

    def __init__(self, ram_plot: pg.PlotItem, gpu_plot: pg.PlotItem) -> None:
        self.ram_plot = ram_plot
        self.gpu_plot = gpu_plot
        self.ram: dict[int, Curve] = {}  # process number -> its RSS
        self.gpu: dict[tuple[int, int], Curve] = {}  # (process number, device) -> allocated
        self.labels: dict[int, str] = {}  # the RSS curves' labels, renamed when a rank is known

    def curves(self) -> list[Curve]:
        return [*self.ram.values(), *self.gpu.values()]

    def clear(self) -> None:
        for curve in self.ram.values():
            self._remove(self.ram_plot, curve)
        for curve in self.gpu.values():
            self._remove(self.gpu_plot, curve)
        self.ram, self.gpu, self.labels = {}, {}, {}

    @staticmethod
    def _remove(plot: pg.PlotItem, curve: Curve) -> None:
        plot.removeItem(curve.item)
        if plot.legend is not None:
            plot.legend.removeItem(curve.item)

    def refresh(self, job: Profile) -> None:
        for process in job_order(job):
            self._refresh_ram(process)
            self._refresh_gpu(process)

    def entries(self, job: Profile) -> tuple[list[tuple[pg.PlotDataItem, str]], ...]:
        """(RAM legend entries, GPU legend entries) of these curves, in the job's order."""
        ram: list[tuple[pg.PlotDataItem, str]] = []
        gpu: list[tuple[pg.PlotDataItem, str]] = []
        for process in job_order(job):
            number = process.process.proc
            if number in self.ram:
                ram.append((self.ram[number].item, rss_label(process)))
            for (owner, device), curve in sorted(self.gpu.items()):
                if owner == number:
                    gpu.append((curve.item, gpu_label(process, device)))
        return ram, gpu

    def uses_gpu(self, job: Profile) -> bool:
        return any(process.gpu is not None for process in job_order(job))

    def _refresh_ram(self, process: Profile) -> None:
        ram = process.ram
        if ram is None or not len(ram):
            return
        number = process.process.proc
        curve = self.ram.get(number)
        if curve is None:
            series = Series(f"proc{number}", rss_label(process), process_color(process))
            curve = self.ram[number] = Curve(make_curve(self.ram_plot, series))
        start, rows = curve.source_rows, len(ram)
        if rows > start:
            curve.extend(ram.t[start:rows], ram["rss"][start:rows], rows)

    def _refresh_gpu(self, process: Profile) -> None:
        gpu = process.gpu
        if gpu is None or not len(gpu):
            return
        number = process.process.proc
        rows = len(gpu)
        mine = [device for owner, device in self.gpu if owner == number]
        seen = max((self.gpu[(number, d)].source_rows for d in mine), default=0)
        for device in np.unique(gpu["device"][seen:rows]).tolist():
            if (number, device) not in self.gpu:
                style = DEVICE_STYLES[len(mine) % len(DEVICE_STYLES)]
                label = gpu_label(process, device)
                series = Series(f"gpu{number}.{device}", label, process_color(process))
                item = make_curve(self.gpu_plot, series, style)
                self.gpu[(number, device)] = Curve(item)
                mine.append(device)
        for device in mine:
            curve = self.gpu[(number, device)]
            start = curve.source_rows
            if rows > start:
                keep = gpu["device"][start:rows] == device
                curve.extend(gpu.t[start:rows][keep], gpu["allocated"][start:rows][keep], rows)

    def readout(self, job: Profile, t: float) -> list[str]:
        """Each process' RSS at time t (the sample at or before t): "rank 1 312.0 MiB"."""
        parts = []
        for process in job_order(job):
            curve = self.ram.get(process.process.proc)
            if curve is None or not curve.n or t < curve.x[0]:
                continue
            i = max(0, int(np.searchsorted(curve.x, t, side="right")) - 1)
            parts.append(f"{process.process.label} {format_bytes(int(curve.y[i]))}")
        return parts

"""The curves every view shows, defined once: what each one is, its label and its colour.

The timeline, the HTML report, the summary and the diagnosis rules all take a series from here,
so a label means the same numbers wherever it appears. Colours stay distinct for the common
forms of colour blindness.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from profiler.profile.model import FloatArray, Profile, SampleTable

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Series:
    key: str  # the column it is read from, or the derived series' own name
    label: str
    color: str
    dashed: bool = False


# RAM (the "ram" table, one row per sample of the process tree)
MAIN_RSS = Series("rss", "Main process (RSS)", "#1f77b4")
MAIN_PEAK = Series("rss_peak", "Main process, peak between samples", "#74a9cf")
WORKERS = Series("children", "Workers (USS)", "#2ca02c")
PROCESS_TREE = Series("tree", "Process tree", "#ff7f0e")

# GPU (the "gpu" table, per device; "nvml" for the driver's view)
GPU_ALLOCATED = Series("allocated", "Allocated", "#d62728")
GPU_ALLOCATED_PEAK = Series("allocated_peak", "Allocated, peak between samples", "#f4a6a6")
GPU_RESERVED = Series("reserved", "Reserved", "#9467bd")
GPU_RESERVED_PEAK = Series("reserved_peak", "Reserved, peak between samples", "#c5b0d5")
DEVICE_USED = Series("device_used", "Device used (NVML)", "#8c564b", dashed=True)

# Marks on the time axis, the same in the app and the report: optimizer steps, epochs, the
# errors and the exit the run ended with, and the phases of an iteration.
MARK_COLORS: dict[str, str] = {
    "iteration": "#7f7f7f",
    "epoch": "#17becf",
    "error": "#c62f2f",
    "exit": "#555555",
    "forward": "#6baed6",
    "backward": "#fdae6b",
}


def process_tree_bytes(ram: SampleTable, start: int = 0, stop: int | None = None) -> IntArray:
    """RAM of the whole process tree for rows [start, stop) of a ram table.

    The main process counts with its peak between samples (VmHWM-based, so a spike shorter
    than the interval is not lost) and the children with their USS (summing their RSS would
    count copy-on-write pages shared with the main process twice).
    """
    tree: IntArray = ram["rss_peak"][start:stop] + ram["children"][start:stop]
    return tree


def process_tree(profile: Profile) -> tuple[FloatArray, IntArray] | None:
    """(t, bytes) of the process tree over the whole run; None without RAM samples."""
    ram = profile.ram
    if ram is None or not len(ram):
        return None
    return ram.t, process_tree_bytes(ram)

"""The curves every view shows, defined once: what each one is, its label and its colour.

The timeline, the HTML report, the summary and the diagnosis rules all take a series from here,
so a label means the same numbers wherever it appears. Colours stay distinct for the common
forms of colour blindness. The iterations of a run's loop (`iterations`) are defined here too,
for every loop shape: optimizer steps, backward passes, or batches of forward passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from memsight.profiler import protocol
from memsight.profiler.profile.model import FloatArray, Profile, SampleTable
from memsight.profiler.protocol import BACKWARD_PASSES, FORWARD_PASSES, OPTIMIZER_STEPS

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

# Two runs compared (`memsight compare`, the app's Compare With...): the run compared with is
# "before", drawn dashed in grey; the shown run is "after", in its own colours.
BEFORE_TREE = Series("before_tree", "before: process tree", "#606060", dashed=True)
BEFORE_ALLOCATED = Series("before_allocated", "before: allocated", "#606060", dashed=True)
AFTER_TREE = Series("after_tree", "after: process tree", PROCESS_TREE.color)


def memory_name(plot: str, device: int | None) -> str:
    """What a memory is called wherever one is named (the charts, the findings, the comparison):
    "RAM", or "GPU memory (cuda:N)"."""
    return "RAM" if plot == "ram" else f"GPU memory (cuda:{device})"


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
    return tree_bytes(ram["rss_peak"][start:stop], ram["children"][start:stop])


def tree_bytes(rss_peak: IntArray, children: IntArray) -> IntArray:
    """The process tree's bytes from its two columns (process_tree_bytes says why these)."""
    tree: IntArray = rss_peak + children
    return tree


def process_tree(profile: Profile) -> tuple[FloatArray, IntArray] | None:
    """(t, bytes) of the process tree over the whole run; None without RAM samples."""
    ram = profile.ram
    if ram is None or not len(ram):
        return None
    return ram.t, process_tree_bytes(ram)


# -- iterations ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Iterations:
    """The iterations of a run's loop, in time order, and what marks them.

    `kind` says what an iteration is: OPTIMIZER_STEPS (a `steps` row each), BACKWARD_PASSES
    (a backward span each: a loop that updates the weights by hand), or FORWARD_PASSES (an
    inference loop: one batch of outermost forwards each, see `forward_batches`). Iteration
    k (1-based) is marked by [t[k-1], end[k-1]]: the step, the backward pass, or the batch's
    forwards from the first one's start to the last one's end. The boundary between
    iterations k and k+1 is end[k-1].
    """

    kind: str
    t: FloatArray
    end: FloatArray

    def __len__(self) -> int:
        return len(self.t)

    @property
    def index(self) -> IntArray:
        return np.arange(1, len(self.t) + 1, dtype=np.int64)


def phase_mask(spans: SampleTable, kind: int) -> np.ndarray:
    """The spans that are phases of `kind`: every backward pass, and the outermost forward
    passes (depth 0; a module called inside another's forward is part of that phase)."""
    mask: np.ndarray = spans["kind"] == kind
    if kind == protocol.SPAN_FORWARD and "depth" in spans:
        mask &= spans["depth"] == 0
    return mask


def iterations(profile: Profile) -> Iterations | None:
    """The iterations of the run's loop; None when it has none (no module, no optimizer).

    The first kind the run has wins: optimizer steps (every torch.optim loop, closures and
    gradient accumulation included), else backward passes (weights updated by hand, as in
    `p -= lr * p.grad`), else batches of outermost forward passes (inference).
    """
    steps = profile.steps
    if steps is not None:
        return Iterations(OPTIMIZER_STEPS, steps.t, steps["end"])
    spans = profile.spans
    if spans is None:
        return None
    backward = phase_mask(spans, protocol.SPAN_BACKWARD)
    if backward.any():
        t, end = spans.t[backward], spans["end"][backward]
        order = np.argsort(t, kind="stable")
        return Iterations(BACKWARD_PASSES, t[order], end[order])
    forward = phase_mask(spans, protocol.SPAN_FORWARD)
    if not forward.any():
        return None
    t, end, module = spans.t[forward], spans["end"][forward], spans["module"][forward]
    order = np.argsort(t, kind="stable")  # rows are written as forwards end
    t, end, module = t[order], end[order], module[order]
    batch = forward_batches(module)
    starts = np.flatnonzero(np.diff(batch, prepend=-1))
    return Iterations(FORWARD_PASSES, t[starts], np.maximum.reduceat(end, starts))


def forward_batches(modules: np.ndarray) -> IntArray:
    """The batch of each outermost forward (0, 1, 2, …), given their modules in time order.

    A batch is a run of forwards of distinct modules: a loop calling the model and then the
    loss module makes one batch of the two calls, and the next call of a module already in
    the batch starts the next batch. A one-off call before the loop (a warm-up, a feature
    extractor) joins the first batch. A module called several times per batch (a decoder
    stepping through a sequence) counts once per call.
    """
    out = np.empty(len(modules), dtype=np.int64)
    batch = -1
    seen: set[int] = set()
    for i, module in enumerate(modules.tolist()):
        if module in seen or batch < 0:
            batch += 1
            seen = set()
        seen.add(module)
        out[i] = batch
    return out

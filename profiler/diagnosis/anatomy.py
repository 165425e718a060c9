"""The anatomy at the peak: what fills one training iteration's memory, by module.

The agent measures one iteration (profiler/agent/anatomy.py, an "anatomy" event): the bytes
each module's forward saved for backward, and each module's parameters, gradients and
optimizer state. Here that is read as an `Anatomy` per device, with the peak of that
device's memory around the measured iteration (RSS for the CPU, the allocator's reserved
bytes for a CUDA device) and what the modules do not account for ("other": the batch, the
temporaries of forward and backward, the allocator's cache, and, for RAM, the interpreter and
its libraries). Read by the report, the HTML report, the app, activations-dominate and
out-of-memory, and by fit.py's projection.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from memsight.profiler.diagnosis.activations import first_training_forward
from memsight.profiler.profile.model import Event, Profile
from memsight.profiler.profile.series import iterations

# The iterations whose peak stands for the measured one's: it and the next ones, so that an
# anatomy measured on the first forward is compared with a peak after the warm-up as well.
PEAK_ITERATIONS = 3


@dataclass(frozen=True)
class ModuleBytes:
    """One module's own bytes (its submodules' are theirs)."""

    path: str  # "blocks.3.attn"; "" for the root, "CrossEntropyLoss" for a second root
    type: str  # its class name
    activations: int  # saved for backward by its own forward
    activations_fp32: int  # of which float32
    parameters: int
    gradients: int
    optimizer_state: int
    input_bytes: int  # its first input tensor's storage, summed over its calls

    @property
    def total(self) -> int:
        return self.activations + self.parameters + self.gradients + self.optimizer_state

    @property
    def label(self) -> str:
        """The path, or for the root (its path empty) its class name."""
        return self.path or f"({self.type})"


@dataclass(frozen=True)
class Anatomy:
    """What filled one device's memory on the measured iteration."""

    iteration: int
    device: str  # "cpu" or "cuda:N"
    modules: tuple[ModuleBytes, ...]  # largest first
    batch_size: int | None  # the first dimension the root's inputs share
    batch_bytes: int
    largest_saved_bytes: int  # the largest single storage saved for backward
    peak_bytes: int | None  # the device's peak around the iteration; None when not sampled
    peak_t: float | None
    partial: bool  # the iteration did not finish (an error): gradients and state may lack
    t: float  # when it was measured
    # (storage bytes, storages), largest first: the activations charged and the gradients
    # read (empty in profiles recorded before they were listed), for fit.py's model of what
    # malloc keeps.
    saved_sizes: tuple[tuple[int, int], ...] = ()
    gradient_sizes: tuple[tuple[int, int], ...] = ()
    # On CPU, the freed memory glibc's malloc kept around the peak (malloc_kept); else None.
    malloc_kept_bytes: int | None = None

    @property
    def activations_bytes(self) -> int:
        return sum(m.activations for m in self.modules)

    @property
    def activations_fp32_bytes(self) -> int:
        return sum(m.activations_fp32 for m in self.modules)

    @property
    def parameters_bytes(self) -> int:
        return sum(m.parameters for m in self.modules)

    @property
    def gradients_bytes(self) -> int:
        return sum(m.gradients for m in self.modules)

    @property
    def optimizer_state_bytes(self) -> int:
        return sum(m.optimizer_state for m in self.modules)

    @property
    def modules_bytes(self) -> int:
        return sum(m.total for m in self.modules)

    @property
    def other_bytes(self) -> int | None:
        """The peak less what the modules account for (never below 0)."""
        if self.peak_bytes is None:
            return None
        return max(0, self.peak_bytes - self.modules_bytes)

    @property
    def plot(self) -> str:
        return "ram" if self.device == "cpu" else "gpu"

    @property
    def cuda_index(self) -> int | None:
        if self.device.startswith("cuda:"):
            return int(self.device.removeprefix("cuda:"))
        return None


@dataclass(frozen=True)
class NotMeasured:
    """The agent did not measure the iteration, and why (the report says it)."""

    iteration: int
    reason: str


def anatomy_event(profile: Profile) -> Event | None:
    events = list(profile.events_of("anatomy"))
    return events[-1] if events else None


def not_measured(profile: Profile) -> NotMeasured | None:
    event = anatomy_event(profile)
    if event is None or not event.get("skipped"):
        return None
    return NotMeasured(int(event.get("iteration") or 0), str(event.get("skipped")))


def anatomies(profile: Profile) -> list[Anatomy]:
    """One anatomy per device that the measured iteration used, the largest first."""
    event = anatomy_event(profile)
    if event is None or event.get("skipped"):
        return []
    by_device: dict[str, list[ModuleBytes]] = {}
    for row in event.get("modules") or []:
        if not isinstance(row, dict):
            continue
        try:
            module = ModuleBytes(
                path=str(row["path"]),
                type=str(row["type"]),
                activations=int(row["activations"]),
                activations_fp32=int(row.get("activations_fp32", 0)),
                parameters=int(row["parameters"]),
                gradients=int(row["gradients"]),
                optimizer_state=int(row["optimizer_state"]),
                input_bytes=int(row.get("input_bytes", 0)),
            )
        except (KeyError, TypeError, ValueError):
            continue
        by_device.setdefault(str(row.get("device", "cpu")), []).append(module)
    iteration = int(event.get("iteration") or 0)
    size = event.get("batch_size")
    batch_size = int(size) if isinstance(size, int) and size > 0 else None
    largest = event.get("largest_saved")
    largest_saved = largest if isinstance(largest, dict) else {}
    found = []
    for device, modules in by_device.items():
        modules.sort(key=lambda m: (-m.total, m.path))
        peak = _peak(profile, device, iteration, event.t)
        found.append(
            Anatomy(
                iteration=iteration,
                device=device,
                modules=tuple(modules),
                batch_size=batch_size,
                batch_bytes=int(event.get("batch_bytes") or 0),
                largest_saved_bytes=int(largest_saved.get(device) or 0),
                peak_bytes=None if peak is None else peak[0],
                peak_t=None if peak is None else peak[1],
                partial=bool(event.get("partial")),
                t=event.t,
                saved_sizes=_storage_sizes(event.get("saved_sizes"), device),
                gradient_sizes=_storage_sizes(event.get("gradient_sizes"), device),
            )
        )
    found = [replace(a, malloc_kept_bytes=malloc_kept(profile, a)) for a in found]
    found.sort(key=lambda a: -a.modules_bytes)
    return found


def _storage_sizes(value: object, device: str) -> tuple[tuple[int, int], ...]:
    """One device's [[bytes, storages], ...] of the event, as pairs (malformed rows skipped)."""
    rows = value.get(device) if isinstance(value, dict) else None
    if not isinstance(rows, list):
        return ()
    pairs = []
    for row in rows:
        if isinstance(row, list) and len(row) == 2 and all(type(v) is int and v > 0 for v in row):
            pairs.append((row[0], row[1]))
    return tuple(pairs)


def malloc_kept(profile: Profile, anatomy: Anatomy) -> int | None:
    """On CPU, the most freed memory glibc's malloc kept in its heaps (the agent's heap table,
    agent/heap.py) over the measured iteration and the next ones: bytes the peak's RSS holds
    though no live allocation does. None for an accelerator's anatomy or without readings."""
    heap = profile.tables.get("heap")
    if anatomy.device != "cpu" or heap is None or not len(heap):
        return None
    low, high = _window(profile, anatomy.iteration, anatomy.t)
    inside = (heap.t >= low) & (heap.t <= high)
    if not inside.any():
        return None
    return int(heap["free"][inside].max())


def main_anatomy(profile: Profile) -> Anatomy | None:
    """The anatomy of the device that holds the most of the model (the one to fit)."""
    found = anatomies(profile)
    return found[0] if found else None


def _peak(
    profile: Profile, device: str, iteration: int, measured_t: float
) -> tuple[int, float] | None:
    """The device's highest memory over the measured iteration and the next ones."""
    window = _window(profile, iteration, measured_t)
    if device == "cpu":
        ram = profile.ram
        if ram is None or not len(ram):
            return None
        t, values = ram.t, ram["rss_peak"]
    else:
        gpu = profile.gpu
        if gpu is None or not device.startswith("cuda:"):
            return None
        mine = gpu["device"] == int(device.removeprefix("cuda:"))
        t, values = gpu.t[mine], gpu["reserved_peak"][mine]
    # The first sample after the window's end still covers its last moments (each row holds
    # the highest value since the previous one).
    first = int(np.searchsorted(t, window[0], side="left"))
    last = int(np.searchsorted(t, window[1], side="right")) + 1
    chunk = values[first:last]
    if not len(chunk):
        return None
    at = int(np.argmax(chunk))
    return int(chunk[at]), float(t[first + at])


def _window(profile: Profile, iteration: int, measured_t: float) -> tuple[float, float]:
    """From the start of the measured iteration to the end of the PEAK_ITERATIONS-th from it
    (as far as the run went); the measured event's time when the loop is unknown."""
    loop = iterations(profile)
    if loop is None or not len(loop) or iteration < 1:
        return (0.0, measured_t)
    ends = loop.end
    start = float(ends[iteration - 2]) if 2 <= iteration <= len(ends) + 1 else 0.0
    if iteration == 1:
        found = first_training_forward(profile)
        start = float(loop.t[0]) if found is None else found
    last = min(len(ends), iteration - 1 + PEAK_ITERATIONS)
    end = float(ends[last - 1]) if last >= 1 else measured_t
    return (start, max(end, start))


def anatomy_for(profile: Profile, plot: str, device: int | None) -> Anatomy | None:
    """The anatomy of one memory: "ram" (the CPU's) or "gpu" with its CUDA index."""
    name = "cpu" if plot == "ram" else f"cuda:{device if device is not None else 0}"
    for anatomy in anatomies(profile):
        if anatomy.device == name:
            return anatomy
    return None

"""What the activations take at the training peak: per iteration, the highest memory between
two optimizer steps, less the level read at the first of them (parameters, kept gradients,
optimizer state and anything else that persists, leaks included), less the gradients and
optimizer state once more (they may be rebuilt within the iteration). The first iteration is
measured from the level just before the first training forward. What remains lives only
during forward and backward: the activations saved for backward and the batch. The largest
iteration counts. For RAM when the parameters are on the CPU, and for each CUDA device
holding parameters.

Read by activations-dominate (its finding), no-mixed-precision (float32 training whose
activations dominate) and dataset-on-device (what was put on the device before training).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memsight.profiler import protocol
from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.signals import breakdown, forward_rows, gpu_devices, gpu_rows
from memsight.profiler.profile.model import Profile


@dataclass(frozen=True)
class ActivationEstimate:
    plot: str
    device: int | None
    peak: int
    peak_t: float
    baseline: int
    state: dict[str, int]  # params, grads, state
    start: float

    @property
    def model_bytes(self) -> int:
        return sum(self.state.values())

    @property
    def activations(self) -> int:
        return self.peak - self.baseline - self.state["grads"] - self.state["state"]


def first_training_forward(profile: Profile) -> float | None:
    rows = forward_rows(profile)
    if rows is None:
        return None
    flags = rows["flags"]
    training = (flags & protocol.FLAG_TRAINING != 0) & (flags & protocol.FLAG_GRAD != 0)
    if not training.any():
        return None
    return float(rows["t"][np.argmax(training)])


def estimates(profile: Profile) -> list[ActivationEstimate]:
    start = first_training_forward(profile)
    steps = profile.steps
    if start is None or steps is None:
        return []
    out = []
    cpu_state = breakdown(profile, "cpu")
    ram = profile.ram
    if cpu_state and cpu_state["params"] > 0 and ram is not None and len(ram):
        levels = steps["rss"]
        known = levels >= 0
        est = _estimate(
            "ram", None, ram.t, ram["rss"], ram["rss_peak"], start, cpu_state,
            steps.t[known], levels[known],
        )  # fmt: skip
        if est is not None:
            out.append(est)
    gpu_state = breakdown(profile, "gpu")
    if gpu_state and gpu_state["params"] > 0:
        for device in gpu_devices(profile):
            rows = gpu_rows(profile, device)
            if rows is None:
                continue
            mine = (steps["device"] == device) & (steps["allocated"] >= 0)
            est = _estimate(
                "gpu", device, rows.t, rows["allocated"], rows["allocated_peak"], start,
                gpu_state, steps.t[mine], steps["allocated"][mine],
            )  # fmt: skip
            if est is not None:
                out.append(est)
    return out


def _estimate(
    plot: str,
    device: int | None,
    t: np.ndarray,
    level: np.ndarray,
    peaks: np.ndarray,
    start: float,
    state: dict[str, int],
    step_t: np.ndarray,
    step_level: np.ndarray,
) -> ActivationEstimate | None:
    before = int(np.searchsorted(t, start, side="left")) - 1
    if before < 0 or t[-1] < start:
        return None
    later = step_t > start
    boundaries = np.concatenate([[start], step_t[later]])
    bases = np.concatenate([[level[before]], step_level[later]])
    first = np.searchsorted(t, boundaries, side="left")
    nonempty = np.diff(np.append(first, len(t))) > 0
    first, bases = first[nonempty], bases[nonempty]
    highest = np.maximum.reduceat(peaks, first)
    i = int(np.argmax(highest - bases))
    peak_at = int(
        first[i] + np.argmax(peaks[first[i] : first[i + 1] if i + 1 < len(first) else None])
    )
    return ActivationEstimate(
        plot, device, int(highest[i]), float(t[peak_at]), int(bases[i]), state, float(t[first[i]])
    )


def dominates(estimate: ActivationEstimate, config: DiagnosisConfig) -> bool:
    return (
        estimate.activations >= config.activations_min_bytes
        and estimate.activations >= config.activations_ratio * max(estimate.model_bytes, 1)
    )

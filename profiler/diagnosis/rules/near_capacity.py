"""near-capacity: the peak came within 10 % of the capacity (warning).

RAM: the process tree's peak against the smallest of the run's budget (`--ram-budget`), the
cgroup limit and the machine's RAM. GPU: the larger of PyTorch's reserved peak and the device's
used memory (NVML) against the device's capacity. A run that ended in an OOM on that resource
gets the out-of-memory finding instead.
"""

from __future__ import annotations

import numpy as np

from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding
from memsight.profiler.diagnosis.signals import (
    device_total,
    gpu_devices,
    gpu_rows,
    oom_kind,
    ram_capacity,
)
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import process_tree
from memsight.profiler.units import format_bytes

RULE_ID = "near-capacity"
EXPLANATION = (
    "The run fits, but only just: its peak came within a few percent of what is available. "
    "A slightly longer sequence, a bigger batch, another process or a different driver "
    "version is enough to turn this into an out-of-memory error."
)


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    oom = oom_kind(profile, config)
    findings = []
    if oom not in ("cpu", "python", "killed"):
        findings += _ram(profile, config)
    if oom != "gpu":
        for device in gpu_devices(profile):
            findings += _gpu(profile, config, device)
    return findings


def _span(t: np.ndarray, used: np.ndarray, threshold: float) -> tuple[float, float]:
    above = np.flatnonzero(used >= threshold)
    return float(t[above[0]]), float(t[above[-1]])


def _ram(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    capacity = ram_capacity(profile)
    tree = process_tree(profile)
    if capacity is None or tree is None:
        return []
    t, used = tree
    peak = int(used.max())
    threshold = config.near_capacity_fraction * capacity.bytes
    if peak < threshold:
        return []
    start, end = _span(t, used, threshold)
    share = peak / capacity.bytes
    text = (
        f"process tree peaked at {format_bytes(peak)}, {share:.0%} of {capacity.label} "
        f"({format_bytes(capacity.bytes)})"
    )
    ram = profile.ram
    assert ram is not None
    children_peak = int(ram["children"].max())
    fixes: tuple[str, ...] = ("smaller-batch", "del-and-scope")
    if children_peak >= config.near_capacity_workers_share * peak:
        fixes = ("dataloader-worker-memory", *fixes)
    return [
        Finding(
            RULE_ID,
            "warning",
            f"RAM peaked at {share:.0%} of {capacity.label}",
            EXPLANATION,
            Evidence(
                text,
                start,
                end,
                "ram",
                None,
                {
                    "peak_bytes": peak,
                    "capacity_bytes": capacity.bytes,
                    "share": round(share, 4),
                    "children_peak_bytes": children_peak,
                },
            ),
            fixes,
        )
    ]


def _gpu(profile: Profile, config: DiagnosisConfig, device: int) -> list[Finding]:
    total = device_total(profile, device)
    rows = gpu_rows(profile, device)
    if total is None or rows is None:
        return []
    sources = [(rows.t, rows["reserved_peak"])]
    nvml = profile.table("nvml")
    if nvml is not None and len(nvml):
        mine = nvml["device"] == device
        if mine.any():
            sources.append((nvml.t[mine], nvml["used"][mine]))
    peak = max(int(used.max()) for _, used in sources)
    threshold = config.near_capacity_fraction * total
    if peak < threshold:
        return []
    spans = [_span(t, used, threshold) for t, used in sources if used.max() >= threshold]
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    share = peak / total
    text = (
        f"cuda:{device} peaked at {format_bytes(peak)} of {format_bytes(total)} ({share:.0%}), "
        f"PyTorch reserved at most {format_bytes(int(rows['reserved_peak'].max()))}"
    )
    return [
        Finding(
            RULE_ID,
            "warning",
            f"GPU memory peaked at {share:.0%} of cuda:{device}'s capacity",
            EXPLANATION,
            Evidence(
                text,
                start,
                end,
                "gpu",
                None,
                {
                    "device": device,
                    "peak_bytes": peak,
                    "capacity_bytes": total,
                    "share": round(share, 4),
                },
            ),
            ("mixed-precision", "activation-checkpointing", "smaller-batch", "allocator-config"),
        )
    ]

"""non-pytorch-gpu-memory: device memory used far beyond PyTorch's reserved pool (info).

NVML reports what the device has in use (all processes) and, where the driver allows, what
this process uses; PyTorch's allocator reports what it reserved. The difference is the CUDA
context, libraries' workspaces (cuBLAS, cuDNN, NCCL), other allocators, and other processes.
Taken as the median over the samples after CUDA came up, so a brief workspace does not count.
"""

from __future__ import annotations

import numpy as np

from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding
from memsight.profiler.diagnosis.signals import device_total, gpu_devices, gpu_rows
from memsight.profiler.profile.model import Profile
from memsight.profiler.units import format_bytes

RULE_ID = "non-pytorch-gpu-memory"
EXPLANATION = (
    "The device had much more memory in use than PyTorch's allocator reserved. That memory is "
    "invisible to torch.cuda.memory_allocated() and to the allocator's limits, yet it counts "
    "toward the device's capacity: other processes on the same GPU, the CUDA context, or "
    "library workspaces (NCCL, cuBLAS, cuDNN)."
)


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    nvml = profile.table("nvml")
    if nvml is None or not len(nvml):
        return []
    out = []
    for device in gpu_devices(profile):
        rows = gpu_rows(profile, device)
        total = device_total(profile, device)
        mine = (nvml["device"] == device) & (nvml.t >= (rows.t[0] if rows is not None else 0))
        if rows is None or total is None or not mine.any():
            continue
        t = nvml.t[mine]
        index = np.searchsorted(rows.t, t, side="right") - 1
        reserved = rows["reserved"][np.maximum(index, 0)]
        used, process_used = nvml["used"][mine], nvml["process_used"][mine]
        excess = used - reserved
        median = int(np.median(excess))
        if median < max(config.non_pytorch_min_bytes, config.non_pytorch_min_share * total):
            continue
        others = int(np.median(used - process_used)) if (process_used > 0).all() else None
        own = median - others if others is not None else None
        text = f"device used exceeded PyTorch's reserved memory by {format_bytes(median)} (median)"
        if others is not None and own is not None:
            text += (
                f": {format_bytes(own)} in this process outside the allocator, "
                f"{format_bytes(others)} in other processes"
            )
        out.append(
            Finding(
                RULE_ID,
                "info",
                f"cuda:{device} holds {format_bytes(median)} that PyTorch did not allocate",
                EXPLANATION,
                Evidence(
                    text,
                    float(t[0]),
                    float(t[-1]),
                    "gpu",
                    None,
                    {
                        "device": device,
                        "median_excess_bytes": median,
                        "other_processes_bytes": others,
                        "own_outside_allocator_bytes": own,
                        "capacity_bytes": total,
                    },
                ),
                ("other-gpu-processes",),
            )
        )
    return out

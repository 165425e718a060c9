"""fragmentation: reserved but unallocated memory is large, or the allocator retried (warning).

The caching allocator keeps freed blocks reserved for reuse; when the blocks it holds are the
wrong sizes for new requests it must reserve more (reserved minus allocated grows) or, when the
device is full, free its cache and retry (num_alloc_retries). Measured at the allocated peak,
at an OOM (its message reports the reserved-but-unallocated amount) and through the retries
that succeeded. Every out-of-memory error counts one retry too (PyTorch frees its cache and
tries once more before it raises: CUDACachingAllocator.cpp, malloc(), `release_cached_blocks()
&& alloc_block(params, true, ...)`; seen on an H200, docs/gpu-verification.md), so the retries
that count are num_alloc_retries minus num_ooms: the others are the OOM itself, not
fragmentation. At an OOM, the allocator's block list (profiler/diagnosis/blocks.py), when the agent
took one, adds how many free blocks that memory is in and the largest of them.
"""

from __future__ import annotations

import numpy as np

from memsight.profiler.diagnosis.blocks import oom_blocks
from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding
from memsight.profiler.diagnosis.signals import final_exception, gpu_devices, gpu_rows
from memsight.profiler.profile.model import Profile
from memsight.profiler.units import format_bytes

RULE_ID = "fragmentation"
EXPLANATION = (
    "PyTorch's caching allocator held memory it could not use for the requests it got: free "
    "pieces of reserved blocks too small or split the wrong way. That memory counts against "
    "the device but holds no tensor. Expandable segments let the allocator grow blocks instead "
    "of reserving new ones, which removes most of this waste."
)


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    out = []
    exc = final_exception(profile)
    oom_numbers = exc.get("numbers") if exc is not None and exc.get("oom") == "gpu" else None
    blocks = oom_blocks(profile, exc) if oom_numbers is not None else None
    for device in gpu_devices(profile):
        rows = gpu_rows(profile, device)
        if rows is None:
            continue
        flushed = rows["alloc_retries"].astype(np.int64) - rows["ooms"].astype(np.int64)
        retries = max(int(flushed.max()), 0)
        i = int(np.argmax(rows["allocated"]))
        allocated, reserved = int(rows["allocated"][i]), int(rows["reserved"][i])
        gap, at, when = reserved - allocated, "at the allocated peak", float(rows.t[i])
        if isinstance(oom_numbers, dict) and oom_numbers.get("device", device) == device:
            unallocated = oom_numbers.get("reserved_unallocated")
            if isinstance(unallocated, int) and unallocated > gap:
                gap, at, when = unallocated, "at the out-of-memory error", exc.t if exc else when
                reserved = int(oom_numbers.get("reserved") or (allocated + gap))
        large = gap >= max(
            config.fragmentation_min_bytes, config.fragmentation_min_share * reserved
        )
        if not large and retries == 0:
            continue
        parts = []
        numbers: dict[str, int] = {}
        if large:
            parts.append(
                f"{format_bytes(gap)} reserved but unallocated {at} ({gap / max(reserved, 1):.0%} of reserved)"
            )
            if blocks is not None and at.endswith("error") and blocks.device in (None, device):
                parts[-1] += (
                    f", in {blocks.free_blocks} free blocks, the largest "
                    f"{format_bytes(blocks.largest_free)}"
                )
                numbers = {
                    "free_blocks": blocks.free_blocks,
                    "largest_free_block_bytes": blocks.largest_free,
                }
        if retries:
            first_retry = float(rows.t[np.argmax(flushed > 0)])
            parts.append(f"the allocator freed its cache and retried {retries} times")
            when = min(when, first_retry)
        out.append(
            Finding(
                RULE_ID,
                "warning",
                f"GPU memory on cuda:{device} is fragmented",
                EXPLANATION,
                Evidence(
                    "; ".join(parts),
                    when,
                    float(rows.t[-1]) if retries else when,
                    "gpu",
                    None,
                    {
                        "device": device,
                        "reserved_unallocated_bytes": gap,
                        "reserved_bytes": reserved,
                        "alloc_retries": retries,
                        **numbers,
                    },
                ),
                ("allocator-config", "empty-cache", "smaller-batch"),
            )
        )
    return out

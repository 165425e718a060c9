"""A fake CUDA caching allocator behind the small torch.cuda / torch._C surface memsight reads.

Imported by a script that runs under `memsight run` (copied beside it by the test), after
`import torch` (the CPU build): `install()` puts the fake in place of what this PyTorch build
lacks, so the real agent, its real instrumentation, the recorder and the profile are exercised
end to end. Every function keeps the signature and behaviour of PyTorch's own, as
/work/shared/notes/pytorch-memory.md sections 1 and 3.5 cite them:

- `torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="all",
  max_entries=sys.maxsize, device=None, clear_history=False, compile_context=False,
  global_record_annotations=False, skip_actions=None)`; a bool `enabled` goes to the legacy
  API `(enabled, record_context=True, trace_alloc_max_entries=1,
  trace_alloc_record_context=False, device=None, record_context_cpp=False, ...)`, as
  torch/cuda/memory.py dispatches it. `enabled=None` stops recording.
- `torch._C._cuda_isHistoryEnabled()`.
- `torch.cuda.memory._snapshot(device=None, augment_with_fx_traces=False)`: a dict with
  `segments` (each `device`, `address`, `total_size`, `allocated_size`, `active_size`,
  `requested_size`, `stream`, `segment_type`, `segment_pool_id`, `is_expandable`, `frames`,
  `blocks`: each `address`, `size`, `requested_size`, `state` ("active_allocated",
  "active_pending_free", "inactive"), `frames` [{`filename`, `line`, `name`}, innermost
  first]), `device_traces` (one list per device of {`action`, `addr`, `size`, `stream`,
  `frames`, `time_us`, and `device_free` for an "oom"}; empty unless `enabled="all"`) and
  `allocator_settings`.
- `torch._C._cuda_attach_out_of_memory_observer(fn)`: append-only; at an OOM the allocator
  counts it, records an "oom" trace entry, calls each observer with `(device, alloc_size,
  allowed_or_total, device_free)`, then raises torch.OutOfMemoryError with the message format
  of section 3.4.

The allocator itself is simple: 2 MiB-rounded requests, each in a segment of its own unless a
free block of a segment fits it (split from the front); a freed block becomes "inactive". When
a new segment would not fit, it does what PyTorch's malloc() does before it raises
(CUDACachingAllocator.cpp: `release_cached_blocks() && alloc_block(params, true, ...)`): it
returns every segment with no live block to the device, counts one retry
(`num_alloc_retries`, counted by alloc_block when isRetry) and tries again, so each OOM comes
with one retry and the free memory left at an OOM is the free parts of segments still in use,
as on an H200 (docs/gpu-verification.md).
"""

from __future__ import annotations

import sys
import time
import traceback
from types import SimpleNamespace
from typing import Any

MiB = 1 << 20
GiB = 1 << 30
TOTAL = 8 * GiB
ROUND = 2 * MiB

calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []


class FakeAllocator:
    def __init__(self, total: int = TOTAL) -> None:
        self.total = total
        self.segments: list[dict[str, Any]] = []
        self.next_address = 0x7F0000000000
        self.history: str | None = None  # None, "state" or "all"
        self.context: str | None = None
        self.max_entries = 1
        self.trace: list[dict[str, Any]] = []
        self.observers: list[Any] = []
        self.ooms = 0
        self.alloc_retries = 0
        self.peak_allocated = 0
        self.peak_reserved = 0
        self.initialized = False
        self.returned: list[dict[str, Any]] = []  # every snapshot handed out, in order

    # -- what torch exposes -------------------------------------------------------------------

    def record_memory_history(
        self,
        enabled: Any = "all",
        context: str | None = "all",
        stacks: str = "all",
        max_entries: int = sys.maxsize,
        device: Any = None,
        clear_history: bool = False,
        compile_context: bool = False,
        global_record_annotations: bool = False,
        skip_actions: list[str] | None = None,
    ) -> None:
        if isinstance(enabled, bool):
            raise AssertionError("memsight used the legacy API on a torch that has the new one")
        calls.append(
            (
                "_record_memory_history",
                (enabled,),
                {"context": context, "stacks": stacks, "max_entries": max_entries},
            )
        )
        if enabled not in (None, "state", "all"):
            raise ValueError(f"unknown enabled {enabled!r}")
        self.history = enabled
        self.context = context if enabled is not None else None
        # In C++, max_entries is forced to 1 unless enabled == "all" (memory_snapshot.cpp).
        self.max_entries = max_entries if enabled == "all" else 1
        if enabled is None or clear_history:
            self.trace = []

    def is_history_enabled(self) -> bool:
        return self.history is not None

    def snapshot(self, device: Any = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
        calls.append(("_snapshot", (), {}))
        segments = []
        for segment in self.segments:
            blocks = [dict(b, frames=list(b["frames"])) for b in segment["blocks"]]
            active = [b for b in blocks if b["state"] != "inactive"]
            segments.append(
                {
                    "device": 0,
                    "address": segment["address"],
                    "total_size": segment["total_size"],
                    "allocated_size": sum(
                        b["size"] for b in blocks if b["state"] == "active_allocated"
                    ),
                    "active_size": sum(b["size"] for b in active),
                    "requested_size": sum(b["requested_size"] for b in active),
                    "stream": 0,
                    "segment_type": "large" if segment["total_size"] > MiB else "small",
                    "segment_pool_id": (0, 0),
                    "is_expandable": False,
                    "frames": list(segment["frames"]),
                    "blocks": blocks,
                }
            )
        snapshot = {
            "segments": segments,
            "device_traces": [list(self.trace)] if self.history == "all" else [[]],
            "allocator_settings": {
                "PYTORCH_CUDA_ALLOC_CONF": None,
                "max_split_size": -1,
                "expandable_segments": False,
                "trace_alloc_max_entries": self.max_entries,
                "trace_alloc_overflowed": False,
            },
        }
        self.returned.append(snapshot)
        return snapshot

    def attach_out_of_memory_observer(self, observer: Any) -> None:
        self.observers.append(observer)

    # -- what the script does with it (what torch.empty(..., device="cuda") would) -----------------

    def _frames(self) -> list[dict[str, Any]]:
        if self.context is None:
            return []
        stack = traceback.extract_stack()[:-2]  # the caller of alloc() is innermost
        return [{"filename": f.filename, "line": f.lineno, "name": f.name} for f in reversed(stack)]

    def _record(self, action: str, **entry: Any) -> None:
        if self.history != "all":
            return
        self.trace.append(
            {"action": action, "stream": 0, "time_us": int(time.time() * 1e6), **entry}
        )
        if len(self.trace) > self.max_entries:
            del self.trace[0]

    def reserved(self) -> int:
        return sum(s["total_size"] for s in self.segments)

    def allocated(self) -> int:
        return sum(
            b["size"]
            for s in self.segments
            for b in s["blocks"]
            if b["state"] == "active_allocated"
        )

    def alloc(self, requested: int) -> int:
        """Allocate like the caching allocator; returns the block's address."""
        self.initialized = True
        size = -(-requested // ROUND) * ROUND
        frames = self._frames()
        for segment in self.segments:
            for i, block in enumerate(segment["blocks"]):
                if block["state"] == "inactive" and block["size"] >= size:
                    rest = block["size"] - size
                    new = {
                        "address": block["address"],
                        "size": size,
                        "requested_size": requested,
                        "state": "active_allocated",
                        "frames": frames,
                    }
                    parts = [new]
                    if rest:
                        parts.append(
                            {
                                "address": block["address"] + size,
                                "size": rest,
                                "requested_size": 0,
                                "state": "inactive",
                                "frames": [],
                            }
                        )
                    segment["blocks"][i : i + 1] = parts
                    self._record("alloc", addr=new["address"], size=size, frames=frames)
                    self._peaks()
                    return int(new["address"])
        if self.reserved() + size > self.total:
            self.release_cached_segments()
            self.alloc_retries += 1
            if self.reserved() + size > self.total:
                self.out_of_memory(requested)
        address = self.next_address
        self.next_address += size + ROUND
        self.segments.append(
            {
                "address": address,
                "total_size": size,
                "frames": frames,
                "blocks": [
                    {
                        "address": address,
                        "size": size,
                        "requested_size": requested,
                        "state": "active_allocated",
                        "frames": frames,
                    }
                ],
            }
        )
        self._record("segment_alloc", addr=address, size=size, frames=frames)
        self._record("alloc", addr=address, size=size, frames=frames)
        self._peaks()
        return address

    def free(self, address: int) -> None:
        for segment in self.segments:
            for block in segment["blocks"]:
                if block["address"] == address and block["state"] == "active_allocated":
                    block["state"] = "inactive"
                    block["requested_size"] = 0
                    self._record("free_requested", addr=address, size=block["size"], frames=[])
                    self._record("free_completed", addr=address, size=block["size"], frames=[])
                    block["frames"] = []
                    return
        raise KeyError(address)

    def release_cached_segments(self) -> None:
        """Give back to the device every segment that holds no live block."""
        for segment in [s for s in self.segments if not _in_use(s)]:
            self.segments.remove(segment)
            self._record(
                "segment_free", addr=segment["address"], size=segment["total_size"], frames=[]
            )

    def out_of_memory(self, requested: int) -> None:
        import torch

        free = self.total - self.reserved()
        self.ooms += 1
        self._record("oom", size=requested, device_free=free, frames=self._frames())
        for observer in self.observers:
            observer(0, requested, self.total, free)
        allocated = self.allocated()
        raise torch.OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {_size(requested)}. GPU 0 has a total "
            f"capacity of {_size(self.total)} of which {_size(free)} is free. Of the allocated "
            f"memory {_size(allocated)} is allocated by PyTorch, and "
            f"{_size(self.reserved() - allocated)} is reserved by PyTorch but unallocated. If "
            "reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
        )

    def _peaks(self) -> None:
        self.peak_allocated = max(self.peak_allocated, self.allocated())
        self.peak_reserved = max(self.peak_reserved, self.reserved())

    def memory_stats(self, device: int) -> dict[str, Any]:
        def stat(current: int, peak: int) -> dict[str, Any]:
            return {"all": {"current": current, "peak": peak}}

        allocated, reserved = self.allocated(), self.reserved()
        return {
            "allocated_bytes": stat(allocated, self.peak_allocated),
            "reserved_bytes": stat(reserved, self.peak_reserved),
            "active_bytes": stat(allocated, self.peak_allocated),
            "inactive_split_bytes": stat(reserved - allocated, reserved - allocated),
            "num_alloc_retries": self.alloc_retries,
            "num_ooms": self.ooms,
        }


def _in_use(segment: dict[str, Any]) -> bool:
    return any(b["state"] == "active_allocated" for b in segment["blocks"])


def _size(n: int) -> str:
    return f"{n / MiB:.2f} MiB" if n < GiB else f"{n / GiB:.2f} GiB"


def install(total: int = TOTAL) -> FakeAllocator:
    """Put the fake in place in the imported torch; returns the allocator to drive."""
    import torch
    import torch.cuda.memory

    allocator = FakeAllocator(total)
    cuda: Any = torch.cuda  # its functions replaced by fakes that only look like torch's
    cuda.is_initialized = lambda: allocator.initialized
    cuda.device_count = lambda: 1
    cuda.current_device = lambda: 0
    cuda.get_device_properties = lambda i: SimpleNamespace(
        name="Fake GPU", total_memory=allocator.total
    )
    torch._C._cuda_memoryStats = allocator.memory_stats
    torch._C._cuda_attach_out_of_memory_observer = allocator.attach_out_of_memory_observer  # type: ignore[attr-defined]
    torch._C._cuda_isHistoryEnabled = allocator.is_history_enabled
    torch.cuda.memory._record_memory_history = allocator.record_memory_history
    torch.cuda.memory._snapshot = allocator.snapshot
    return allocator

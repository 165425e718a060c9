"""The CUDA caching allocator's own records: its history, its snapshots, its block list.

- History (`memsight run --cuda-history[=N]`): once the script has initialised CUDA, the agent
  asks the allocator to record the Python stack of every allocation and a ring buffer of its
  last N alloc/free events (`torch.cuda.memory._record_memory_history`), unless the script
  already records history itself: then its settings stay as they are.
- Snapshots (with `--cuda-history`): `torch.cuda.memory._snapshot()` at an out-of-memory error
  (at most MAX_OOM_SNAPSHOTS) and at exit, pickled exactly as `_dump_snapshot` writes it into
  the private folder the recorder named in the agent's config; a `cuda_snapshot` event names
  the file and the recorder stores it in the profile (profiler/recorder/snapshots.py).
- The block list at an out-of-memory error, with or without history: a `cuda_blocks` event
  summing up the allocator's segments and blocks on that device (free memory inside the
  segments, the largest free block, the largest allocated blocks and, with history, the stack
  that allocated each).

Everything here runs inside the user's interpreter: standard library only, Python 3.9+, and
nothing raises into the script (the callers catch and report).
"""

from __future__ import annotations

import linecache
import os
import pickle
import threading
import time
from typing import Any, Dict, List, Optional

from .port import AgentPort

MAX_OOM_SNAPSHOTS = 3  # the allocator reports OOMs it recovers from too (cuDNN's retries)
MAX_BLOCK_SUMMARIES = 8
LARGEST_BLOCKS = 20  # allocated blocks listed in a cuda_blocks event
BLOCK_FRAMES = 24  # innermost Python frames kept per block
SOURCE_CHARS = 300
OBSERVER_WINDOW_NS = 5_000_000_000  # an exception this soon after the observer's is its OOM

FREE = "inactive"
ALLOCATED = "active_allocated"


class CudaSnapshots:
    def __init__(self, agent: AgentPort, max_entries: int, folder: Optional[str]) -> None:
        self.agent = agent
        self.max_entries = max_entries  # 0: --cuda-history was not given
        self.folder = folder if max_entries > 0 else None
        self.history: Optional[str] = None  # "memsight" or "script" once recording
        self._lock = threading.Lock()
        self._attempted = False
        self._files = 0
        self._oom_files = 0
        self._summaries = 0
        self._observed_at: Optional[int] = None  # when the OOM observer last summed up

    # -- history ---------------------------------------------------------------------------------

    def start_history(self, torch: Any) -> None:
        """Turn the allocator's history on (once, CUDA initialised), unless the script has."""
        with self._lock:
            if self._attempted or self.max_entries <= 0:
                return
            self._attempted = True
        memory = getattr(getattr(torch, "cuda", None), "memory", None)
        record = getattr(memory, "_record_memory_history", None)
        if record is None:
            self.agent.event(
                "cuda_history", started=False, reason="this torch cannot record memory history"
            )
            return
        is_enabled = getattr(getattr(torch, "_C", None), "_cuda_isHistoryEnabled", None)
        if is_enabled is not None and is_enabled():
            self.history = "script"
            self.agent.event(
                "cuda_history", started=False, reason="the script records history itself"
            )
            return
        try:
            record(enabled="all", context="all", stacks="python", max_entries=self.max_entries)
            api = "current"
        except TypeError:
            # torch 2.0's signature: record(enabled: bool, record_context, ...).
            record(
                True,
                record_context=True,
                trace_alloc_max_entries=self.max_entries,
                trace_alloc_record_context=True,
            )
            api = "legacy"
        self.history = "memsight"
        self.agent.event("cuda_history", started=True, max_entries=self.max_entries, api=api)

    # -- out of memory and exit ----------------------------------------------------------------------

    def at_oom(
        self,
        torch: Any,
        device: Optional[int],
        reason: str,
        requested: Optional[int] = None,
        exc_id: Optional[int] = None,
    ) -> None:
        """Sum up the allocator's blocks on `device` now (and keep a snapshot, with history).

        reason "oom": the allocator's OOM observer, before the error is raised; "exception":
        an OOM error seen without the observer's call before it.
        """
        now = time.monotonic_ns()
        with self._lock:
            if reason == "exception":
                observed = self._observed_at
                if observed is not None and now - observed < OBSERVER_WINDOW_NS:
                    self._observed_at = None
                    return  # the observer summed up this OOM already
            else:
                self._observed_at = now
            if self._summaries >= MAX_BLOCK_SUMMARIES:
                return
            self._summaries += 1
            keep = self.folder is not None and self._oom_files < MAX_OOM_SNAPSHOTS
            if keep:
                self._oom_files += 1
        snapshot = take_snapshot(torch)
        if device is None:
            device = _current_device(torch)
        extra: Dict[str, Any] = {}
        if requested is not None:
            extra["requested"] = int(requested)
        if exc_id is not None:
            extra["exc_id"] = exc_id
        self.agent.event(
            "cuda_blocks", t=now, reason=reason, **summarize_blocks(snapshot, device), **extra
        )
        if keep:
            self.write(snapshot, "oom" if reason == "oom" else "exception", device, now)

    def at_exit(self, torch: Any) -> None:
        """The exit snapshot (with --cuda-history, once the script has used CUDA)."""
        if self.folder is None or torch is None:
            return
        cuda = getattr(torch, "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return
        self.write(take_snapshot(torch), "exit", None, time.monotonic_ns())

    def write(self, snapshot: Any, reason: str, device: Optional[int], t: int) -> None:
        """Pickle `snapshot` into the recorder's folder, as `_dump_snapshot` would, and say so."""
        folder = self.folder
        if folder is None:
            return
        with self._lock:
            self._files += 1
            number = self._files
        name = "snapshot-%d.pickle" % number
        partial = os.path.join(folder, name + ".partial")
        with open(partial, "wb") as f:
            pickle.dump(snapshot, f)
        size = os.path.getsize(partial)
        os.replace(partial, os.path.join(folder, name))  # the recorder takes only whole files
        segments = snapshot.get("segments") if isinstance(snapshot, dict) else None
        traces = snapshot.get("device_traces") if isinstance(snapshot, dict) else None
        self.agent.event(
            "cuda_snapshot",
            t=t,
            snapshot=number,
            reason=reason,
            file=name,
            bytes=size,
            device=device,
            segments=len(segments) if isinstance(segments, list) else None,
            trace_entries=sum(len(d) for d in traces if isinstance(d, list))
            if isinstance(traces, list)
            else None,
            history=self.history,
        )


def take_snapshot(torch: Any) -> Any:
    """`torch.cuda.memory._snapshot()`: every device's segments, and the history if recorded."""
    return torch.cuda.memory._snapshot()


def _current_device(torch: Any) -> Optional[int]:
    try:
        return int(torch.cuda.current_device())
    except Exception:
        return None


def summarize_blocks(
    snapshot: Any, device: Optional[int], limit: int = LARGEST_BLOCKS
) -> Dict[str, Any]:
    """The allocator's state on `device` (every device for None) from a snapshot, in numbers.

    `free` is memory inside the segments that no tensor uses (inactive blocks), the memory a
    request could only use where a single free block is large enough; `largest` lists the
    largest allocated blocks with the innermost Python frames that allocated each (outermost
    first, as tracebacks are), where the allocator recorded them.
    """
    segments = snapshot.get("segments") if isinstance(snapshot, dict) else None
    out: Dict[str, Any] = {
        "device": device,
        "segments": 0,
        "reserved": 0,
        "allocated": 0,
        "allocated_requested": 0,  # what the allocated blocks were asked for, before rounding
        "free": 0,
        "free_blocks": 0,
        "largest_free": 0,
        "pending_free": 0,
        "allocated_blocks": 0,
        "with_frames": 0,
        "largest": [],
    }
    allocated: List[Dict[str, Any]] = []
    for segment in segments if isinstance(segments, list) else []:
        if not isinstance(segment, dict):
            continue
        if device is not None and segment.get("device", device) != device:
            continue
        out["segments"] += 1
        out["reserved"] += _int(segment.get("total_size"))
        blocks = segment.get("blocks")
        for block in blocks if isinstance(blocks, list) else []:
            if not isinstance(block, dict):
                continue
            size = _int(block.get("size"))
            state = block.get("state")
            if state == FREE:
                out["free"] += size
                out["free_blocks"] += 1
                out["largest_free"] = max(out["largest_free"], size)
            elif state == ALLOCATED:
                out["allocated"] += size
                out["allocated_blocks"] += 1
                frames = _frames(block)
                requested = block.get("requested_size")
                out["allocated_requested"] += _int(requested) if requested is not None else size
                if frames:
                    out["with_frames"] += 1
                allocated.append({"size": size, "block": block, "frames": frames})
            else:  # active_pending_free (the docstring's active_awaiting_free)
                out["pending_free"] += size
    allocated.sort(key=lambda b: b["size"], reverse=True)
    for item in allocated[:limit]:
        block = item["block"]
        entry: Dict[str, Any] = {"size": item["size"]}
        requested = block.get("requested_size")
        if isinstance(requested, int):
            entry["requested_size"] = requested
        entry["frames"] = _python_frames(item["frames"])
        out["largest"].append(entry)
    return out


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _frames(block: Dict[str, Any]) -> List[Any]:
    frames = block.get("frames")
    if isinstance(frames, list):
        return frames
    history = block.get("history")  # snapshots of torch before 2.1
    if isinstance(history, list) and history and isinstance(history[0], dict):
        old = history[0].get("frames")
        return old if isinstance(old, list) else []
    return []


def _python_frames(frames: List[Any]) -> List[List[Any]]:
    """The innermost BLOCK_FRAMES Python frames (the allocator lists them innermost first),
    as `[file, line, function, source]`, outermost first."""
    out: List[List[Any]] = []
    for frame in frames:
        if not isinstance(frame, dict):
            continue
        filename = frame.get("filename")
        line = frame.get("line")
        if not isinstance(filename, str) or not isinstance(line, int):
            continue
        if not (filename.endswith(".py") or (filename.startswith("<") and filename.endswith(">"))):
            continue  # a C++ frame (stacks="all")
        source = linecache.getline(filename, line).strip()[:SOURCE_CHARS] if line > 0 else ""
        out.append([filename, line, str(frame.get("name", "")), source])
        if len(out) >= BLOCK_FRAMES:
            break
    out.reverse()
    return out

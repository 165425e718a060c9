"""Profile files of multi-process jobs, written frame by frame as the recorder writes them
(profiler/recorder/session.py): the launcher is process 0 with its own tables; process k >= 1
has its rows in the shared procs_ tables (a `proc` column after `t`) and its events carry
"proc": k. Loaded back with profiler.profile.storage.load_profile, they go through the same
reader and builder as a recorded torchrun job."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memsight.profiler import protocol
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.storage import load_profile
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.protocol import GPU_TABLE, RAM_TABLE, SPAN_TABLE, STEP_TABLE, TableSchema
from memsight.profiler.recorder.blocks import TableBuffer
from memsight.profiler.recorder.session import PROCS_RAM_TABLE

MiB = 1024**2
GiB = 1024**3
T0 = 1_000_000_000_000  # the run's clock, in ns; every "t" below is seconds after it
LAUNCHER_PID = 100
SAMPLE_S = 0.05  # the recorder's RAM interval in these files


def _shared(schema: TableSchema, table_id: int) -> TableSchema:
    return TableSchema(
        table_id, f"procs_{schema.name}", [schema.columns[0], ("proc", "I"), *schema.columns[1:]]
    )


PROCS_STEPS = _shared(STEP_TABLE, 160)
PROCS_SPANS = _shared(SPAN_TABLE, 161)
PROCS_GPU = _shared(GPU_TABLE, 162)


@dataclass
class Rank:
    """One rank of the job: its RSS over time, and a training loop of `steps` iterations,
    each a forward, a backward and an optimizer step, one every `step_s` from `loop_s`."""

    rank: int
    rss: Callable[[float], int]  # bytes at `t` seconds
    start_s: float = 0.2
    end_s: float = 10.0
    loop_s: float = 1.0
    step_s: float = 0.2
    steps: int = 40
    exit_code: int | None = 0
    signal: int | None = None
    events: list[dict[str, Any]] = field(default_factory=list)  # "t" in seconds
    gpu: Callable[[float], int] | None = None  # bytes allocated on its device (cuda:rank)

    def step_start(self, i: int) -> float:
        """When iteration `i` (1-based) begins: its forward."""
        return self.loop_s + (i - 1) * self.step_s


def ns(t: float) -> int:
    return T0 + round(t * 1e9)


def constant(level: int) -> Callable[[float], int]:
    return lambda _t: level


def oom(t: float) -> dict[str, Any]:
    """An uncaught CPU out-of-memory error at `t` seconds (the agent's exception event)."""
    return {
        "t": t,
        "type": "exception",
        "exc_type": "RuntimeError",
        "message": "DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 GiB",
        "uncaught": True,
        "oom": "cpu",
        "phase": "backward",
        "numbers": {},
    }


def _rows(schema: TableSchema, rows: Sequence[tuple[int, ...]]) -> bytes:
    table = TableBuffer(schema)
    for row in rows:
        table.add(row)
    return schema.frame() + table.drain()


def _events(items: list[dict[str, Any]]) -> bytes:
    return protocol.encode_json_frame(protocol.EVENTS, items)


def _rank_frames(proc: int, r: Rank) -> list[bytes]:
    ram, peak, t = [], 0, r.start_s
    while t <= r.end_s + 1e-9:
        rss = r.rss(t)
        peak = max(peak, rss)
        ram.append((ns(t), proc, rss, peak, 0, 8 * GiB))
        t += SAMPLE_S
    steps, spans = [], []
    step_width = len(STEP_TABLE.columns)
    for i in range(1, r.steps + 1):
        begin = r.step_start(i)
        if begin + r.step_s > r.end_s:
            break
        forward, backward, step = begin, begin + 0.4 * r.step_s, begin + 0.8 * r.step_s
        spans.append((ns(forward), proc, ns(backward), protocol.SPAN_FORWARD, i, 1, 0, 0))
        spans.append((ns(backward), proc, ns(step), protocol.SPAN_BACKWARD, i, -1, 0, 0))
        # t, proc, end, index, optimizer (name 1), cleared (zero_grad since the step before;
        # nothing to clear before the first); the breakdown unmeasured (-1)
        cleared = protocol.CLEARED_FIRST_STEP if i == 1 else protocol.CLEARED_ZERO_GRAD
        steps.append((ns(step), proc, ns(step + 0.01), i, 1, cleared, *([-1] * (step_width - 5))))
    events = [{**e, "t": ns(e["t"]), "proc": proc} for e in r.events]
    events.append({"t": ns(r.start_s), "type": "name", "id": 1, "name": "SGD", "proc": proc})
    frames = [_rows(PROCS_RAM_TABLE, ram), _events(events)]
    if r.gpu is not None:
        gpu, peak = [], 0
        for row in ram:
            allocated = r.gpu((row[0] - T0) / 1e9)
            peak = max(peak, allocated)
            # t, proc, device, allocated, allocated_peak, reserved, reserved_peak, the rest 0
            gpu.append((row[0], proc, r.rank, allocated, peak, peak, peak, allocated, 0, 0, 0))
        frames.append(_rows(PROCS_GPU, gpu))
    if steps:
        frames += [_rows(PROCS_STEPS, steps), _rows(PROCS_SPANS, spans)]
    return frames


def write_job(path: Path, ranks: Sequence[Rank]) -> Path:
    """A launcher (pid 100, about 100 MiB, role "other") and `ranks`, as processes 1, 2, ...
    in the order given (pids 101, 102, ...), written to `path`."""
    writer = ProfileWriter(path)
    writer.write(protocol.encode_json_frame(protocol.RUN, {"t0_ns": T0, "script": "launch.py"}))
    writer.mark_processes()
    end = max(r.end_s for r in ranks) + 0.1
    launcher = [
        (ns(i * SAMPLE_S), 100 * MiB, 100 * MiB, 0, 8 * GiB) for i in range(int(end / SAMPLE_S))
    ]
    writer.write(_rows(RAM_TABLE, launcher))
    started: list[dict[str, Any]] = [
        {"t": T0 + 1000, "type": "process", "proc": 0, "pid": LAUNCHER_PID, "parent": 1}
    ]
    for proc, r in enumerate(ranks, 1):
        started.append(
            {
                "t": ns(r.start_s),
                "type": "process",
                "proc": proc,
                "pid": LAUNCHER_PID + proc,
                "parent": LAUNCHER_PID,
                "rank": r.rank,
                "local_rank": r.rank,
                "world_size": len(ranks),
            }
        )
    writer.write(_events(started))
    for proc, r in enumerate(ranks, 1):
        for frame in _rank_frames(proc, r):
            writer.write(frame)
    ended: list[dict[str, Any]] = [
        {
            "t": ns(r.end_s + 0.01),
            "type": "child_exited",
            "pid": LAUNCHER_PID + proc,
            "exit_code": r.exit_code,
            "signal": r.signal,
        }
        for proc, r in enumerate(ranks, 1)
    ]
    failed = any(r.exit_code or r.signal for r in ranks)
    ended.append({"t": ns(end), "type": "exit", "exit_code": 1 if failed else 0, "signal": None})
    ended.append({"t": ns(end), "type": "recording_end"})
    writer.write(_events(ended))
    writer.close()
    return path


def load_job(path: Path, ranks: Sequence[Rank]) -> Profile:
    return load_profile(write_job(path, ranks))

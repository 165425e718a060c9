"""Synthetic profiles: Profile objects built directly from arrays, never recorded.

The one place tests build a Profile by hand: `table`, `steps`, `ram`, `spans` and `oom_event`
make its parts with exact, known shapes; `profile` puts them together. The rule tests
(tests/diagnosis/) use them for the edges of each rule (the pattern, and the look-alikes it must
stay silent on); `sample_profile` is the fixed run the HTML report is checked against
(tests/report/). Real recordings are covered end to end (tests/test_examples.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memsight.profiler import protocol
from memsight.profiler.profile.model import (
    ChildProcess,
    DeviceInfo,
    Event,
    OutputChunk,
    Profile,
    RunInfo,
    SampleTable,
)
from memsight.profiler.profile.processes import ProcessInfo

MiB = 1024**2
GiB = 1024**3
SCHEMAS = {
    s.name: s
    for s in (
        protocol.RAM_TABLE,
        protocol.CHILD_TABLE,
        protocol.NVML_TABLE,
        *protocol.AGENT_TABLES,
    )
}


def table(name: str, t: Sequence[float] | np.ndarray, **columns: object) -> SampleTable:
    """A table of the named schema; columns not given are -1 (agent tables) or 0."""
    schema = SCHEMAS[name]
    rows = len(t)
    names = [c for c, _ in schema.columns]
    unknown = set(columns) - set(names)
    assert not unknown, f"no such columns in {name}: {unknown}"
    default = -1 if schema.id >= protocol.AGENT_TABLE_BASE else 0
    block = {}
    for column in names:
        if column == "t":
            block[column] = np.asarray(t, dtype=np.float64)
            continue
        value = columns.get(column, default)
        dtype = np.float64 if column == "end" else np.int64
        block[column] = np.broadcast_to(np.asarray(value, dtype=dtype), (rows,)).copy()
    out = SampleTable(name, names)
    out.append(block)
    return out


def profile(
    *tables: SampleTable,
    events: Sequence[Event] = (),
    ram_total: int = 16 * GiB,
    devices: Sequence[tuple[int, int]] = (),
    **info: object,
) -> Profile:
    run = RunInfo(script="train.py", ram_total_bytes=ram_total, **info)  # type: ignore[arg-type]
    run.devices = [DeviceInfo(i, f"GPU {i}", total) for i, total in devices]
    p = Profile(info=run, events=list(events), tables={tb.name: tb for tb in tables})
    p.complete = True
    return p


def steps(
    levels: Sequence[float] | np.ndarray, start: float = 1.0, dt: float = 0.1, **columns: object
) -> SampleTable:
    """One optimizer step every dt seconds, with memory `levels` at each (as rss unless given)."""
    n = len(levels)
    t = start + dt * np.arange(n)
    columns.setdefault("rss", np.asarray(levels))
    columns.setdefault("cleared", protocol.CLEARED_ZERO_GRAD)
    return table("steps", t, end=t + dt / 10, index=np.arange(1, n + 1), **columns)


def ram(seconds: float, rss: object, interval: float = 0.01, **columns: object) -> SampleTable:
    t = np.arange(0, seconds, interval)
    values = rss(t) if callable(rss) else rss
    columns.setdefault("rss_peak", values)
    columns.setdefault("available", 8 * GiB)
    return table("ram", t, rss=values, **columns)


def spans(forwards: list[tuple[int, int]], linked: list[int], start: float = 1.0) -> SampleTable:
    """forwards: (flags, module id) per forward, 0.1 s apart; linked: forward ids (1-based)
    that a backward went through, each getting a backward row and a link row."""
    rows = [
        (start + 0.1 * i, protocol.SPAN_FORWARD, i + 1, module, flags)
        for i, (flags, module) in enumerate(forwards)
    ]
    for fid in linked:
        t = start + 0.1 * (fid - 1) + 0.05
        rows += [(t, protocol.SPAN_BACKWARD, fid, 0, 0), (t, protocol.SPAN_LINK, fid, 0, 0)]
    rows.sort(key=lambda row: row[0])
    times, kind, ids, module, flags = (np.array(column) for column in zip(*rows, strict=False))
    return table(
        "spans", times, end=times + 0.01, kind=kind, id=ids, module=module, flags=flags, depth=0
    )


def oom_event(kind: str, t: float = 5.0, **numbers: int) -> Event:
    """The uncaught out-of-memory exception of a run, on the CPU or a GPU (`kind`)."""
    return Event(
        t,
        "exception",
        {
            "exc_type": "torch.OutOfMemoryError" if kind == "gpu" else "RuntimeError",
            "message": "CUDA out of memory."
            if kind == "gpu"
            else "DefaultCPUAllocator: can't allocate memory",
            "uncaught": True,
            "oom": kind,
            "phase": "backward",
            "iteration": 12,
            "numbers": numbers,
        },
    )


def sample_profile(text: str = "") -> Profile:
    """A 30 s CPU training run that leaks 3 MiB per step and ends in a CPU OOM.

    `text` is added to every string the target controls (paths, argv, output, exception,
    module and process names)."""
    t = np.arange(0, 30, 0.01)
    levels = 800 * MiB + 3 * MiB * np.arange(240)
    run_ram = ram(30, lambda x: 500 * MiB + 24 * MiB * x, children=np.where(t > 5, 40 * MiB, 0))
    children = table(
        "children",
        np.arange(5, 30, 0.5),
        pid=4242,
        rss=60 * MiB,
        uss=40 * MiB,
        pss=45 * MiB,
    )
    forwards = [(protocol.FLAG_GRAD | protocol.FLAG_REQUIRES_GRAD, 7)] * 5
    span_table = table(
        "spans",
        25 + 0.1 * np.arange(5),
        end=25 + 0.1 * np.arange(5) + 0.05,
        kind=protocol.SPAN_FORWARD,
        id=np.arange(1, 6),
        module=7,
        flags=[f for f, _ in forwards],
        depth=0,
    )
    exception = Event(
        29.5,
        "exception",
        {
            "exc_id": 1,
            "exc_type": f"builtins.RuntimeError{text}",
            "message": f"DefaultCPUAllocator: can't allocate memory{text}",
            "uncaught": True,
            "oom": "cpu",
            "phase": "forward",
            "iteration": 240,
            "numbers": {"requested": 64 * GiB},
            "traceback": [
                {
                    "file": f"/work/train{text}.py",
                    "line": 12,
                    "function": f"main{text}",
                    "source": f"model(x){text}",
                },
            ],
        },
    )
    p = profile(
        run_ram,
        steps(levels, start=1.0, dt=0.1),
        children,
        span_table,
        events=[
            Event(2.0, "epoch", {"loader": 1, "index": 1}),
            Event(14.0, "epoch", {"loader": 1, "index": 2}),
            exception,
            Event(29.9, "exit", {"exit_code": 1}),
        ],
        ram_total=16 * GiB,
        exit_code=1,
        end_t=30.0,
    )
    info = p.info
    info.script = f"train{text}.py"
    info.argv = ["--lr", f"0.1{text}"]
    info.cwd = f"/work/project{text}"
    info.python = f"/usr/bin/python3{text}"
    info.python_version = "3.11.7"
    info.torch_version = f"2.13.0{text}"
    info.hostname = f"host{text}"
    info.start_time = "2026-11-22T10:15:00.000+00:00"
    info.interval_ms = 10.0
    info.memsight_version = "0.1.0"
    p.names[7] = f"Net{text}"
    p.children[4242] = ChildProcess(
        4242, 1, f"pt_data_worker{text}", ["python", f"worker{text}"], 5.0, 30.0
    )
    p.output = [
        OutputChunk(1.0, protocol.STDOUT, f"epoch 1 step 1 loss 2.30{text}\n"),
        OutputChunk(29.5, protocol.STDERR, f"Traceback (most recent call last): {text}\n"),
    ]
    p.warnings = [f"a warning{text}"]
    p.source = f"/work/run{text}.memsight"
    return p


def loop(
    iterations: int,
    modules: Sequence[int] = (1,),
    flags: int | Sequence[int] = protocol.FLAG_GRAD | protocol.FLAG_REQUIRES_GRAD,
    backward: bool = False,
    start: float = 1.0,
    dt: float = 0.1,
) -> SampleTable:
    """A `spans` table for a loop without optimizer steps: per iteration (every dt seconds),
    one forward of each of `modules` in turn (in the first half of the iteration), then, with
    `backward`, one backward pass through all of them (ending at 0.8 dt). `flags`: the same for
    every forward, or one per module."""
    per_module = [flags] * len(modules) if isinstance(flags, int) else list(flags)
    rows = []
    fid = 0
    width = 0.5 * dt / len(modules)
    for i in range(iterations):
        t0 = start + dt * i
        ids = []
        for j, module in enumerate(modules):
            fid += 1
            ids.append(fid)
            t = t0 + j * width
            rows.append((t, t + 0.9 * width, protocol.SPAN_FORWARD, fid, module, per_module[j]))
        if backward:
            t, end = t0 + 0.6 * dt, t0 + 0.8 * dt
            rows.append((t, end, protocol.SPAN_BACKWARD, ids[0], 0, 0))
            rows += [(t, end, protocol.SPAN_LINK, f, 0, 0) for f in ids]
    times, ends, kind, span_ids, module_ids, flag = (np.array(c) for c in zip(*rows, strict=True))
    return table(
        "spans", times, end=ends, kind=kind, id=span_ids, module=module_ids, flags=flag, depth=0
    )


def holder(name: str, kind: str, size: int, count: int = 1, **more: object) -> dict[str, object]:
    """One holder of a census as the agent reports it (agent/census.py): a `kind` ("local",
    "global", "attribute"...) named `name`, reaching `count` tensors of `size` bytes."""
    return {
        "id": f"{kind}:{name}",
        "name": name,
        "kind": kind,
        "container": "list" if kind == "local" else "Tensor",
        "owner": "train",
        "file": "/w/train.py",
        "line": 9,
        "count": count,
        "bytes": size,
        "grad_bytes": 0,
        "with_graph": 0,
        "devices": ["cpu"],
        "dtypes": ["float32"],
        "shapes": [[256, 2048]],
        **more,
    }


def census(t: float, iteration: int, *holders: dict[str, object]) -> Event:
    """A census event taken at optimizer step `iteration`, `t` seconds into the run."""
    data = {"iterations_are": "optimizer steps", "iteration": iteration}
    return Event(t, "census", {**data, "census": {"holders": list(holders)}})


def job(*ranks: Profile, launcher: Profile | None = None) -> Profile:
    """A job: `launcher` (default: an idle target) as process 0, then each of `ranks` as
    process 1, 2, ... with rank 0, 1, ..., pids 1001, 1002, ... and the launcher as parent."""
    main = launcher if launcher is not None else profile(ram(10.0, 100 * MiB))
    main.process = ProcessInfo(0, pid=1000)
    for number, rank in enumerate(ranks, 1):
        rank.process = ProcessInfo(
            number, pid=1000 + number, parent=1000, rank=number - 1, world_size=len(ranks)
        )
        main.subprocesses[number] = rank
    return main


# Enough rows for a curve's levels (app/curvepoints.py: MIN_LEVEL_POINTS blocks of LIVE_FACTOR).
GPU_RUN_ROWS = 40_000


def gpu_run() -> Profile:
    """RAM with a sawtooth, and two devices whose allocator and NVML rows interleave, the
    first row on device 1 (the device the curves follow)."""
    t = 0.01 * np.arange(GPU_RUN_ROWS)
    rss = 1 * GiB + (np.arange(GPU_RUN_ROWS) % 977) * MiB
    device = (np.arange(2 * GPU_RUN_ROWS) + 1) % 2
    both = np.repeat(t, 2)
    allocated = (np.arange(2 * GPU_RUN_ROWS) % 601) * MiB * (device + 1)
    return profile(
        table(
            "ram", t, rss=rss, rss_peak=rss + 5 * MiB, children=(np.arange(GPU_RUN_ROWS) % 13) * MiB
        ),
        table(
            "gpu",
            both,
            device=device,
            allocated=allocated,
            allocated_peak=allocated + MiB,
            reserved=allocated + 64 * MiB,
        ),
        table("nvml", both, device=device, used=allocated + 300 * MiB, total=80 * GiB),
        devices=[(0, 80 * GiB), (1, 80 * GiB)],
    )

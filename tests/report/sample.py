"""A fixed profile with something in every section of the report, and a way to put a
payload into every string that comes from the target."""

from __future__ import annotations

import numpy as np

from profiler import protocol
from profiler.model import ChildProcess, Event, OutputChunk, Profile
from tests.diagnosis.synthetic import GiB, MiB, profile, ram, steps, table


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
    spans = table(
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
        spans,
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

"""What to run and how to record it: the run specification, its JSON form, how a run ended.

Shared by the command line, the desktop app and the recording process; pure data, no I/O.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memsight.profiler.launch.runtime import default_python

DEFAULT_INTERVAL_MS = 10.0
# Trace entries the CUDA allocator keeps under `--cuda-history` without a number (a ring buffer:
# the latest ones are kept), as torch.utils.viz._cycles does.
DEFAULT_CUDA_HISTORY = 100_000


@dataclass(frozen=True)
class RunSpec:
    """What to run and how to record it."""

    target: str  # script path, or module name when `module` is true
    args: tuple[str, ...] = ()
    module: bool = False
    cwd: str = field(default_factory=os.getcwd)
    python: str = field(default_factory=default_python)
    env: Mapping[str, str] | None = None  # the target's whole environment; None: inherit ours
    interval_ms: float = DEFAULT_INTERVAL_MS
    hooks: bool = True
    ram_budget_bytes: int | None = None  # what the run is meant to fit in (near-capacity rule)
    census: str = "auto"  # censuses of live tensors: "auto", "never" or "every-N" (iterations)
    # the iteration whose anatomy is measured: "auto" (the first training forward), "off", "N"
    anatomy: str = "auto"
    # CUDA allocator history (--cuda-history): the trace entries the allocator keeps, 0 for off
    cuda_history: int = 0

    @property
    def display_name(self) -> str:
        """Short name for files and titles: the script's stem or the module's last part."""
        if self.module:
            return self.target.rsplit(".", 1)[-1] or "module"
        return Path(self.target).stem or "script"


@dataclass(frozen=True)
class ExitStatus:
    """How the target ended: its exit code, or the signal that killed it."""

    exit_code: int | None
    signal: int | None

    @property
    def shell_code(self) -> int:
        """What a shell reports: the code itself, or 128+N after death by signal N."""
        if self.signal is not None:
            return 128 + self.signal
        return self.exit_code if self.exit_code is not None else 1


def default_profile_name(spec: RunSpec, now: datetime | None = None) -> str:
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    return f"{spec.display_name}-{stamp}.memsight"


def spec_to_json(
    spec: RunSpec,
    out_path: str | os.PathLike[str],
    attach_pid: int | None = None,
    agent_config_to: str | None = None,
) -> str:
    """One JSON line: the run request the app sends to its recording process. `attach_pid`:
    record that running process (File > Attach) instead of launching `spec`, which then
    describes it. `agent_config_to`: with `attach_pid`, start no agent in it but write what
    an agent needs to reach the recording into that file (the process starts its own:
    `memsight.record`)."""
    return json.dumps(
        {
            **({"attach_pid": attach_pid} if attach_pid is not None else {}),
            **({"agent_config_to": agent_config_to} if agent_config_to is not None else {}),
            "target": spec.target,
            "args": list(spec.args),
            "module": spec.module,
            "cwd": spec.cwd,
            "python": spec.python,
            "env": dict(spec.env) if spec.env is not None else None,
            "interval_ms": spec.interval_ms,
            "hooks": spec.hooks,
            "ram_budget_bytes": spec.ram_budget_bytes,
            "census": spec.census,
            "anatomy": spec.anatomy,
            "cuda_history": spec.cuda_history,
            "out": os.fspath(out_path),
        }
    )


def spec_from_json(line: str) -> tuple[RunSpec, Path]:
    data: dict[str, Any] = json.loads(line)
    spec = RunSpec(
        target=str(data["target"]),
        args=tuple(str(a) for a in data["args"]),
        module=bool(data["module"]),
        cwd=str(data["cwd"]),
        python=str(data["python"]),
        env={str(k): str(v) for k, v in data["env"].items()}
        if data.get("env") is not None
        else None,
        interval_ms=float(data["interval_ms"]),
        hooks=bool(data["hooks"]),
        ram_budget_bytes=int(data["ram_budget_bytes"])
        if data.get("ram_budget_bytes") is not None
        else None,
        census=str(data.get("census", "auto")),
        anatomy=str(data.get("anatomy", "auto")),
        cuda_history=int(data.get("cuda_history") or 0),
    )
    return spec, Path(data["out"])


def attach_pid_of(line: str) -> int | None:
    """The running process a request asks to attach to; None for a run to launch."""
    pid = json.loads(line).get("attach_pid")
    return pid if isinstance(pid, int) and pid > 0 else None


def agent_config_to_of(line: str) -> str | None:
    """Where a request asks for the agent's configuration (an in-process agent); None."""
    path = json.loads(line).get("agent_config_to")
    return path if isinstance(path, str) and path else None

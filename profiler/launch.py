"""Turn a run specification into the child's argv, environment and working directory (pure).

The child is ``PYTHON .../profiler/agent/bootstrap.py SCRIPT ARGS...`` (or ``-m MODULE``). The
agent's connection details travel in one environment variable that the bootstrap removes
before the target's code runs, so the target sees exactly the environment it was given.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from profiler.runtime import default_python

AGENT_ENV = "MEMSIGHT_AGENT"
DEFAULT_INTERVAL_MS = 10.0


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

    @property
    def display_name(self) -> str:
        """Short name for files and titles: the script's stem or the module's last part."""
        if self.module:
            return self.target.rsplit(".", 1)[-1] or "module"
        return Path(self.target).stem or "script"


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]
    cwd: str


def agent_bootstrap_path() -> str:
    return str(Path(__file__).resolve().parent / "agent" / "bootstrap.py")


def build_launch(
    spec: RunSpec,
    port: int,
    token: str,
    base_env: Mapping[str, str],
    bootstrap: str | None = None,
    host: str = "127.0.0.1",
) -> LaunchPlan:
    env = dict(spec.env if spec.env is not None else base_env)
    env[AGENT_ENV] = json.dumps(
        {
            "host": host,
            "port": port,
            "token": token,
            "interval_ms": spec.interval_ms,
            "hooks": spec.hooks,
        }
    )
    head = ["-m", spec.target] if spec.module else [spec.target]
    argv = [spec.python, bootstrap or agent_bootstrap_path(), *head, *spec.args]
    return LaunchPlan(argv=argv, env=env, cwd=spec.cwd)

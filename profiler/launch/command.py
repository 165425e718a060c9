"""Turn a run specification into the child's argv, environment and working directory (pure).

The child is ``PYTHON .../profiler/agent/bootstrap.py SCRIPT ARGS...`` (or ``-m MODULE``). The
agent's connection details travel in one environment variable that the bootstrap removes
before the target's code runs, so the target sees exactly the environment it was given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from profiler.launch.spec import RunSpec
from profiler.protocol import AGENT_ENV


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]
    cwd: str


def agent_bootstrap_path() -> str:
    return str(Path(__file__).resolve().parent.parent / "agent" / "bootstrap.py")


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

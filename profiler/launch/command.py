"""Turn a run specification into the child's argv, environment and working directory (pure).

The child is the user's own command: ``PYTHON SCRIPT ARGS...`` or ``PYTHON -m MODULE ARGS...``,
so sys.argv, sys.orig_argv, /proc/self/cmdline, the stack and warnings' attribution are
exactly what plain python gives. The agent enters the way coverage.py does: memsight's
startup folder goes first on PYTHONPATH, where Python's site module finds its
sitecustomize.py at start-up. The agent's connection details travel in one environment
variable, which the agent removes, together with its PYTHONPATH entry, before the target's
first line runs (profiler/agent/entry.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from memsight.profiler.launch.spec import RunSpec
from memsight.profiler.protocol import AGENT_ENV

PYTHONPATH = "PYTHONPATH"


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]
    cwd: str


def agent_startup_dir() -> str:
    """The folder holding the agent's sitecustomize.py (and nothing else importable)."""
    return str(Path(__file__).resolve().parent.parent / "agent" / "startup")


def build_launch(
    spec: RunSpec,
    port: int,
    token: str,
    base_env: Mapping[str, str],
    startup_dir: str | None = None,
    host: str = "127.0.0.1",
    snapshot_dir: str | None = None,
) -> LaunchPlan:
    """`snapshot_dir`: the private folder where the agent leaves CUDA memory snapshots for the
    recorder to store (`--cuda-history`)."""
    env = dict(spec.env if spec.env is not None else base_env)
    user_path = env.get(PYTHONPATH)
    startup = startup_dir or agent_startup_dir()
    # An empty PYTHONPATH adds nothing to sys.path, but "startup:" would add the working
    # directory: only a non-empty value is kept behind ours.
    env[PYTHONPATH] = startup + os.pathsep + user_path if user_path else startup
    config = {
        "host": host,
        "port": port,
        "token": token,
        "interval_ms": spec.interval_ms,
        "hooks": spec.hooks,
        "census": spec.census,
        "anatomy": spec.anatomy,
        "pythonpath": user_path,  # put back as it was (None: unset) before the target runs
    }
    if spec.cuda_history > 0:
        config["cuda_history"] = spec.cuda_history
        config["snapshot_dir"] = snapshot_dir
    env[AGENT_ENV] = json.dumps(config)
    head = ["-m", spec.target] if spec.module else [spec.target]
    return LaunchPlan(argv=[spec.python, *head, *spec.args], env=env, cwd=spec.cwd)

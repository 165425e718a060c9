"""Start the agent in a process that memsight launched (called from startup/sitecustomize.py).

The launcher put the agent's connection details in one environment variable and its own
folder first on PYTHONPATH; both are put back as the user had them before the target's code
runs, so the target (and every process it starts) sees the environment it was given.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

from ..protocol import AGENT_ENV

PYTHONPATH = "PYTHONPATH"


def start() -> Optional[Any]:
    """The running Agent, or None when this process was not launched by memsight."""
    config = take_config(os.environ)
    if config is None:
        return None
    from .client import start_agent

    agent = start_agent(config)
    if config.get("children", True):
        from .children import ChildEnvironment, install

        install(ChildEnvironment(config))
    return agent


def take_config(environ: Any) -> Optional[Dict[str, Any]]:
    """Remove the agent's variable from `environ` and restore PYTHONPATH; the config or None."""
    raw = environ.pop(AGENT_ENV, None)
    if raw is None:
        return None
    try:
        config = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(config, dict):
        return None
    if "pythonpath" in config:  # the user's own value, None when it was not set
        original = config["pythonpath"]
        if isinstance(original, str):
            environ[PYTHONPATH] = original
        else:
            environ.pop(PYTHONPATH, None)
    return config

"""Start the agent in a process that was running before memsight (`memsight attach`).

The attacher makes the target's main thread run a small loader (recorder/inject.py writes it)
at its next safe point, with the interpreter's lock held: Python 3.14's sys.remote_exec, or a
debugger that queues a pending call. The loader imports this package under its private name,
as the start-up entry does, and calls attach() with the recorder's address and token.

Nothing of the target changes but what detach() takes back out: the hooks and wrappers, the
sys.monitoring callback, an atexit handler, and the agent's thread. The parts of a launched
agent that cannot be removed cleanly are left out: the os._exit and wait wrappers, threading's
exit callbacks and the environment of the children it starts (its children are recorded from
outside, by their memory). Standard library only, like the rest of the agent.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from .client import make_agent, recording_agent


def attach(config_json: str) -> Optional[Any]:
    """Connect to the recorder named in `config_json` and start recording; the Agent.
    Raises RuntimeError in a process that an agent records already (the hooks would run
    twice); its recording has it all."""
    if recording_agent() is not None:
        raise RuntimeError("memsight records this process already (memsight run, or an attach)")
    agent = make_agent(json.loads(config_json))
    agent.start_attached()
    return agent
